"""BM25, RRF fusion and hybrid search on a toy corpus, with scores computed by hand."""
import math

import numpy as np
import pytest

from rag import config
from rag.retrieval import BM25Index, rrf_fuse
from rag.search import HybridConfig, PassageIndex
from rag.chunk import Passage

TEXTS = ["the clinic opens at nine on saturday",   # 7 tokens
         "refills take three business days",       # 5
         "the parking is free",                    # 4
         "we accept personal checks"]              # 4 -> avgdl = 20 / 4 = 5
# Unit 2-d "embeddings": a query along (0.8, 0.6) has cosines 0.8, 1.0, 0.96, 0.6 -> dense order p1, p2, p0, p3.
VECTORS = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
QUERY_VECTOR = np.array([0.8, 0.6], dtype=np.float32)


def toy_index(config=HybridConfig()):
    return PassageIndex([Passage(f"p{i}", f"d{i}", t) for i, t in enumerate(TEXTS)], VECTORS, config)


def test_bm25_okapi_score_by_hand():
    # "parking" is in 1 of 4 passages: idf = ln((4 - 1 + 0.5) / (1 + 0.5)); k1 = 1.5, b = 0.75, dl = 4.
    idf = math.log(3.5 / 1.5)
    expected = idf * 1 * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * 4 / 5))
    assert expected == pytest.approx(0.931097, abs=1e-6)
    np.testing.assert_allclose(BM25Index(TEXTS).get_scores("parking"), [0, 0, expected, 0], atol=1e-9)
    # "the" is in 2 of 4 passages: idf = ln(2.5 / 2.5) = 0, so it is no evidence at all.
    np.testing.assert_allclose(BM25Index(TEXTS).get_scores("the"), [0, 0, 0, 0])


def test_rrf_scores_by_hand_over_the_union_of_candidates():
    dense = [(0, 0.9), (1, 0.5)]
    bm25 = [(2, 3.0), (1, 1.0)]
    # k = 60, equal weights: 0 -> 1/61; 1 -> 1/62 + 1/62; 2 -> 1/61 (tie with 0: lower index first).
    fused = rrf_fuse([dense, bm25], k=60)
    assert [i for i, _ in fused] == [1, 0, 2]  # every candidate of either list, once
    np.testing.assert_allclose([s for _, s in fused], [2 / 62, 1 / 61, 1 / 61])
    # k = 10, weights (1, 2): 0 -> 1/11; 1 -> 1/12 + 2/12 = 0.25; 2 -> 2/11.
    fused = rrf_fuse([dense, bm25], k=10, weights=(1.0, 2.0))
    assert [i for i, _ in fused] == [1, 2, 0]
    np.testing.assert_allclose([s for _, s in fused], [0.25, 2 / 11, 1 / 11])
    with pytest.raises(ValueError, match="2 rankings but 1 weights"):
        rrf_fuse([dense, bm25], weights=(1.0,))


def test_hybrid_ranking_by_hand():
    # "is the parking free": BM25 evidence only for p2 ("the" has idf 0 and is dropped by the 0.0 floor).
    index = toy_index()
    assert [i for i, _ in index.bm25_ranking("is the parking free")] == [2]
    ranking = index.ranking("is the parking free", "hybrid", QUERY_VECTOR)
    # dense ranks p1, p2, p0, p3 -> p2: 1/62 + 1/61; p1: 1/61; p0: 1/63; p3: 1/64.
    assert [i for i, _ in ranking] == [2, 1, 0, 3]
    np.testing.assert_allclose([s for _, s in ranking], [1 / 62 + 1 / 61, 1 / 61, 1 / 63, 1 / 64])


def test_stopwords_keep_function_words_of_a_garbled_transcript_out_of_the_fusion():
    """The fix: "I'M ON THE REEF" (a misheard "how long does a refill take") matches p0 only through
    "on" ("the" has idf 0 here; "i", "m" and "reef" are in no passage). Without stopwords that one
    function word makes p0 BM25's rank 1 and, with BM25 weighted 2, hybrid's top passage; with
    stopwords BM25 has no evidence left, its list is empty and hybrid keeps the dense order."""
    query = "I'M ON THE REEF"
    plain = toy_index(HybridConfig(rrf_k=10, weights=(1.0, 2.0)))
    assert [i for i, _ in plain.bm25_ranking(query)] == [0]
    ranking = plain.ranking(query, "hybrid", QUERY_VECTOR)
    assert ranking[0] == (0, pytest.approx(1 / 13 + 2 / 11))  # p0 jumps from dense rank 3 to 1
    stop = frozenset({"i", "m", "on", "the"})
    fixed = toy_index(HybridConfig(rrf_k=10, weights=(1.0, 2.0), stopwords=stop))
    assert fixed.bm25_ranking(query) == []
    ranking = fixed.ranking(query, "hybrid", QUERY_VECTOR)
    assert [i for i, _ in ranking] == [1, 2, 0, 3]  # = the dense order
    np.testing.assert_allclose([s for _, s in ranking], [1 / 11, 1 / 12, 1 / 13, 1 / 14])


def test_non_string_stopwords_are_refused():
    retrieval = {"rrf_k": 10, "depth": 20, "weight_dense": 1.0, "weight_bm25": 2.0, "use_stopwords": True,
                 "min_token_len": 1, "bm25_floor": 0.0, "phonetic_weight": 1.0,
                 "phonetic_encoder": "metaphone", "phonetic_ngram": 3}
    with pytest.raises(ValueError, match="retrieval.stopwords must be a list of words, got False, True"):
        config.hybrid_config({"retrieval": {**retrieval, "stopwords": ["the", True, False]}})
    words = ["the", "on", "off", "yes", "no"]  # strings in YAML 1.2 (rag.io.read_params), quoted or not
    assert config.hybrid_config({"retrieval": {**retrieval, "stopwords": words}}).stopwords == set(words)
