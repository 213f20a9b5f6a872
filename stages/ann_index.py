"""Stage ann_index (issue 16): the clinic passages' HNSW graph (faiss), built once from embed.npy and saved next to
it, so that every stage with ``retrieval.index: hnsw`` loads it instead of building it (`rag.retrieval.indexes.HNSWIndex`;
m, ef_construction from params ``retrieval``). Writes data/voice/hnsw.faiss."""
import numpy as np

from common import VOICE_DATA, main, params
from rag.retrieval.indexes import HNSWIndex


def run():
    r = params()["retrieval"]
    vectors = np.load(VOICE_DATA / "embed.npy")
    HNSWIndex(vectors, int(r["hnsw_m"]), int(r["hnsw_ef_construction"]), int(r["hnsw_ef_search"])).save(
        VOICE_DATA / "hnsw.faiss")
    print(f"ann_index: {len(vectors)} passages")


main(run)
