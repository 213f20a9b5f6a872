"""The approximate dense index (faiss HNSW, retrieval.index: hnsw) against exact search (issue 16)."""
import numpy as np
import pytest

from rag import config
from rag.io import InputError
from rag.retrieval.indexes import DenseIndex, HNSWIndex
from rag.retrieval.search import HybridConfig, PassageIndex
from rag.voice.queries import load_queries, rewrite_queries
from rag.eval.evaluate import embed_texts

from conftest import ROOT


def clustered(n: int, d: int = 64, centres: int = 50, seed: int = 0) -> np.ndarray:
    """Unit vectors around random centres (structured like embeddings; uniform noise is HNSW's worst case)."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, d))
    x = c[rng.integers(0, centres, n)] + 0.35 * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_hnsw_finds_what_exact_search_finds():
    both = clustered(5100)  # queries from the same clusters as the passages (as questions are near their answers)
    x, queries = both[:5000], both[5000:]
    exact, ann = DenseIndex(x), HNSWIndex(x, m=16, ef_construction=80, ef_search=64)
    hits = [len({i for i, _ in exact.top_k(q, 10)} & {i for i, _ in ann.top_k(q, 10)}) / 10 for q in queries]
    assert np.mean(hits) >= 0.95
    q = queries[0]
    assert ann.best(q) == pytest.approx(exact.best(q), abs=1e-6)  # the top hit and its cosine
    assert len(ann.top_k(q)) == 64 and len(HNSWIndex(x, ef_search=8).top_k(q, 20)) == 8  # ef_search caps a list


def test_save_and_load_round_trip(tmp_path):
    x = clustered(300)
    ann = HNSWIndex(x)
    ann.save(tmp_path / "i.faiss")
    again = HNSWIndex.load(tmp_path / "i.faiss", ef_search=64)
    assert again.top_k(x[7], 5) == ann.top_k(x[7], 5) and again.top_k(x[7], 1)[0][0] == 7
    assert not (tmp_path / "i.faiss.tmp").exists()
    (tmp_path / "bad.faiss").write_bytes(b"not an index")
    with pytest.raises(InputError, match="bad.faiss: not a faiss index"):
        HNSWIndex.load(tmp_path / "bad.faiss")


def test_unknown_index_kind_is_refused():
    with pytest.raises(ValueError, match="retrieval.index must be exact or hnsw, got 'annoy'"):
        HybridConfig(index="annoy")


def test_hnsw_gives_the_clinic_questions_the_same_documents_as_exact(params):
    # the fixture KB is tiny (42 passages): the graph search is exact here; the same top 3 for every question
    hc = config.hybrid_config(params)
    exact = PassageIndex.from_folder(ROOT / "fixtures" / "voice" / "kb", hc)
    ann = PassageIndex(exact.passages, exact.vectors, HybridConfig(**{**hc.__dict__, "index": "hnsw"}))
    assert isinstance(ann.dense, HNSWIndex) and isinstance(exact.dense, DenseIndex)
    texts = rewrite_queries(load_queries(ROOT / "fixtures" / "voice" / "queries.jsonl"), config.rewrite_rules(params))
    vectors = embed_texts(texts)
    for qid, text in texts.items():
        assert ann.search(text, 3, "hybrid_phonetic", vectors[qid]) == exact.search(text, 3, "hybrid_phonetic",
                                                                                    vectors[qid]), qid
