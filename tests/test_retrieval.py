"""BM25, RRF fusion and hybrid search on a toy corpus, with scores computed by hand."""
import math

import numpy as np
import pytest

from rag import config
from rag.retrieval.indexes import BM25Index, convex_fuse, fusion_weights, promote_exact_hit, promote_quoted, rrf_fuse
from rag.voice import abstain
from rag.retrieval.search import HybridConfig, PassageIndex
from rag.retrieval.chunk import Passage

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
                 "phonetic_encoder": "metaphone", "phonetic_ngram": 3, "index": "exact",
                 "hnsw_m": 16, "hnsw_ef_construction": 80, "hnsw_ef_search": 64, "bm25_engine": "rank_bm25",
                 "fusion": "rrf", "convex_weights": [1.0, 1.0, 1.0], "sentence_weight": 0.0}
    with pytest.raises(ValueError, match="retrieval.stopwords must be a list of words, got False, True"):
        config.hybrid_config({"retrieval": {**retrieval, "stopwords": ["the", True, False]}})
    words = ["the", "on", "off", "yes", "no"]  # strings in YAML 1.2 (rag.io.read_params), quoted or not
    assert config.hybrid_config({"retrieval": {**retrieval, "stopwords": words}}).stopwords == set(words)


def test_fusion_settings_are_checked_naming_the_params_key():
    retrieval = {"rrf_k": 10, "depth": 20, "weight_dense": 1.0, "weight_bm25": 2.0, "use_stopwords": False,
                 "stopwords": [], "min_token_len": 1, "bm25_floor": 0.0, "phonetic_weight": 1.0,
                 "phonetic_encoder": "metaphone", "phonetic_ngram": 3, "index": "exact", "hnsw_m": 16,
                 "hnsw_ef_construction": 80, "hnsw_ef_search": 64, "bm25_engine": "rank_bm25", "fusion": "convex",
                 "convex_weights": [1, 0.5, 0], "sentence_weight": 0.0}
    h = config.hybrid_config({"retrieval": retrieval})
    assert (h.fusion, h.convex_weights) == ("convex", (1.0, 0.5, 0.0))
    for bad in ([1.0, 1.0], [0, 0, 0], [1, -1, 1], [1, True, 1], [1, float("nan"), 1], "1 1 1"):
        with pytest.raises(ValueError, match=r"retrieval.convex_weights must list 3 weights >= 0"):
            config.hybrid_config({"retrieval": {**retrieval, "convex_weights": bad}})
    with pytest.raises(ValueError, match="retrieval.fusion must be one of"):
        config.hybrid_config({"retrieval": {**retrieval, "fusion": "max"}})
    for bad in (-1, True, float("inf"), "1"):
        with pytest.raises(ValueError, match=r"retrieval.sentence_weight must be"):
            config.hybrid_config({"retrieval": {**retrieval, "sentence_weight": bad}})
    assert config.hybrid_config({"retrieval": {**retrieval, "sentence_weight": 2}}).sentence_weight == 2.0
    with pytest.raises(ValueError, match=r"ko.learned.weight_grid must list some weights"):
        fusion_weights([], "ko.learned.weight_grid")
    with pytest.raises(ValueError, match=r"retrieval.convex_weights \(dense, bm25, phonetic\) must list 3 weights"):
        HybridConfig(convex_weights=(1.0, float("inf"), 1.0))


def test_convex_fusion_reads_score_gaps_that_rrf_throws_away():
    """"refills on saturday" on the toy corpus: the dense list is p1 1.0, p2 0.96, p0 0.8, p3 0.6 (min-max 1, 0.9,
    0.5, 0); BM25 holds p0 (saturday, 7 tokens) and p1 (refills, 5 tokens), min-max 1 and 0. RRF (k 10) sees only
    ranks: p1 1/11 + 1/12 beats p0 1/13 + 1/11. The convex combination sees BM25's wide gap: p0 0.5 + 1 = 1.5, p1 1
    + 0 = 1.0, p2 0.9, p3 0. The gate's hybrid signal stays RRF (it was fitted on RRF scores)."""
    query = "refills on saturday"
    rrf = toy_index(HybridConfig(rrf_k=10))
    convex = toy_index(HybridConfig(rrf_k=10, fusion="convex"))
    assert [i for i, _ in convex.bm25_ranking(query, 20)] == [0, 1]
    assert [i for i, _ in rrf.ranking(query, "hybrid", QUERY_VECTOR)] == [1, 0, 2, 3]
    assert convex.ranking(query, "hybrid", QUERY_VECTOR) == [(0, pytest.approx(1.5)), (1, pytest.approx(1.0)),
                                                            (2, pytest.approx(0.9)), (3, pytest.approx(0.0))]
    assert convex.ranking(query, "hybrid", QUERY_VECTOR, fusion="rrf") == rrf.ranking(query, "hybrid", QUERY_VECTOR)
    assert abstain.hybrid(convex, query, QUERY_VECTOR) == pytest.approx(1 / 11 + 1 / 12)
    # hybrid_phonetic weighs its third list by convex_weights[2]; 0 leaves it out
    no_phonetic = toy_index(HybridConfig(rrf_k=10, fusion="convex", convex_weights=(1.0, 1.0, 0.0)))
    assert no_phonetic.ranking(query, "hybrid_phonetic", QUERY_VECTOR) == convex.ranking(query, "hybrid", QUERY_VECTOR)
    with pytest.raises(ValueError, match="unknown fusion 'max'"):
        convex.ranking(query, "hybrid", QUERY_VECTOR, fusion="max")


def test_best_sentence_ranking_by_hand():
    from rag.retrieval.indexes import best_sentence_ranking

    owner = np.array([0, 0, 1, 2])                      # passage 3 has no sentence
    sentences = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6]], dtype=np.float32)
    q = np.array([0.0, 1.0], dtype=np.float32)          # cosines 0, 1 | 0.8 | 0.6
    ranked = best_sentence_ranking(owner, sentences, q, 4)
    assert [i for i, _ in ranked] == [0, 1, 2, 3] and ranked[1][1] == pytest.approx(0.8) and ranked[3][1] == -math.inf
    assert [i for i, _ in best_sentence_ranking(owner, sentences, np.array([1.0, 0.0], np.float32), 4, k=2)] == [0, 2]


def test_the_sentence_list_finds_a_passage_by_its_one_matching_sentence():
    from rag.retrieval.embed import passage_embedder, query_embedder

    texts = ["The clinic opens at nine on weekdays. Parking is free behind the building.",
             "Flu shots cost thirty dollars. We accept personal checks and cards.",
             "Refills take three business days."]
    passages = [Passage(f"p{i}", f"d{i}", t) for i, t in enumerate(texts)]
    vectors = passage_embedder().embed(texts)
    off = PassageIndex(passages, vectors, HybridConfig(rrf_k=10))
    on = PassageIndex(passages, vectors, HybridConfig(rrf_k=10, sentence_weight=2.0))
    query = "is the parking free"
    q = query_embedder().embed_one(query)
    sentence_list = on.sentence_ranking(q)
    assert sentence_list[0][0] == 0
    assert sentence_list[0][1] == pytest.approx(float(passage_embedder().embed(["Parking is free behind the building."])[0] @ q), abs=1e-5)
    lists = [on.dense_ranking(q, 20), on.bm25_ranking(query, 20), on.phonetic_ranking(query, 20), on.sentence_ranking(q, 20)]
    assert on.ranking(query, "hybrid_phonetic", q) == rrf_fuse(lists, k=10, weights=[1.0, 1.0, 1.0, 2.0])
    assert off.ranking(query, "hybrid_phonetic", q) == rrf_fuse(lists[:3], k=10, weights=[1.0, 1.0, 1.0])
    assert on.ranking(query, "hybrid", q) == off.ranking(query, "hybrid", q)   # the gate's hybrid signal: 3 lists max
    convex = PassageIndex(passages, vectors, HybridConfig(fusion="convex", convex_weights=(1.0, 0.5, 0.5), sentence_weight=1.0))
    assert convex.ranking(query, "hybrid_phonetic", q) == convex_fuse(lists, [1.0, 0.5, 0.5, 1.0])


def test_convex_fuse_by_hand():
    dense, bm25 = [(1, 0.9), (0, 0.5), (2, 0.1)], [(2, 8.0), (1, 6.0)]
    # min-max: dense p1 1, p0 0.5, p2 0; bm25 p2 1, p1 0; weights 1 and 2: p1 1, p2 2, p0 0.5
    assert convex_fuse([dense, bm25], [1.0, 2.0]) == [(2, 2.0), (1, 1.0), (0, 0.5)]
    assert convex_fuse([dense, []], [1.0, 1.0]) == [(1, 1.0), (0, 0.5), (2, 0.0)]  # an empty list adds nothing
    with pytest.raises(ValueError, match="2 rankings but 1 weights"):
        convex_fuse([dense, bm25], [1.0])


# Exact-match override (rag.retrieval.indexes.promote_exact_hit). p0 alone holds "0177"; "555" is in p0 and p1.
NUMBER_TEXTS = ["call the billing office at 555-0177",
                "call the nurse line at 555-0148",
                "the nurse line is open all night",
                "the billing office is open on weekdays"]
POSTINGS = {"555": {0, 1}, "0177": {0}, "0148": {1}, "billing": {0, 3}, "night": {2}}
FUSED = [(1, 0.39), (0, 0.38), (2, 0.36), (3, 0.33)]  # RRF sank p0 to second place


def test_promote_exact_hit_when_both_lexical_lists_agree_on_a_unique_number():
    bm25, phonetic = [(0, 4.4), (1, 1.7)], [(0, 10.2), (1, 5.2)]
    promoted = promote_exact_hit(FUSED, [bm25, phonetic], ["what", "0177"], POSTINGS)
    assert promoted == [(0, 0.39), (1, 0.39), (2, 0.36), (3, 0.33)]  # p0 first at the top score, rest in RRF order
    assert promote_exact_hit(FUSED, [bm25], ["0177"], POSTINGS)[0][0] == 0  # plain hybrid: BM25 alone decides
    assert promote_exact_hit(FUSED, [[(1, 3.0)]], ["0148"], POSTINGS) == FUSED  # already first: unchanged


def test_promote_exact_hit_keeps_plain_rrf_order_otherwise():
    bm25 = [(0, 4.4), (1, 1.7)]
    # the lexical lists disagree on rank 1
    assert promote_exact_hit(FUSED, [bm25, [(1, 6.0), (0, 5.0)]], ["0177"], POSTINGS) == FUSED
    # one lexical list is empty (no evidence above the floor)
    assert promote_exact_hit(FUSED, [bm25, []], ["0177"], POSTINGS) == FUSED
    # a common token: "555" is in two passages, "billing" in two
    assert promote_exact_hit(FUSED, [bm25, bm25], ["555", "billing"], POSTINGS) == FUSED
    # a df-1 word without a digit (a misheard word can be unique to the wrong passage)
    assert promote_exact_hit([(1, 0.4), (2, 0.3)], [[(2, 2.0)], [(2, 3.0)]], ["night"], POSTINGS) == [(1, 0.4), (2, 0.3)]
    # the unique number is in another passage than the lexical top
    assert promote_exact_hit(FUSED, [[(3, 2.0)], [(3, 2.0)]], ["0177"], POSTINGS) == FUSED
    assert promote_exact_hit([], [bm25], ["0177"], POSTINGS) == []


def test_promote_quoted_puts_the_one_passage_naming_the_number_first():
    named_by = {"5550177": [0], "5550148": [1, 2]}
    ranked = [(3, 0.5), (1, 0.4), (0, 0.2)]
    assert promote_quoted(ranked, {"5550177"}, named_by) == [(0, 0.5), (3, 0.5), (1, 0.4)]
    assert promote_quoted([(3, 0.5)], {"5550177"}, named_by) == [(0, 0.5), (3, 0.5)]  # not ranked at all: inserted
    assert promote_quoted(ranked, {"5550148"}, named_by) == ranked  # two passages name it: the ranking decides
    assert promote_quoted(ranked, {"5550177", "5550148"}, named_by) == ranked
    assert promote_quoted(ranked, {"5550199"}, named_by) == ranked  # no passage names it
    assert promote_quoted([], {"5550177"}, named_by) == [(0, 0.0)]  # BM25 found no word: the passage, score 0
    assert promote_quoted(ranked, {"15555550177"}, named_by)[0][0] == 0  # the country code written in the question


def test_a_unique_number_stays_first_after_fusion_on_a_tiny_index():
    """Dense order p2, p3, p1, p0 weighted 10; BM25 and the phonetic list both rank p0 first (BM25 has only
    p0: "555" is in 2 of 4 passages, idf 0). RRF alone sinks p0 to third (hybrid: 10/14 + 1/11 < 10/12) and
    second (hybrid_phonetic: 10/14 + 2/11 < 10/11); the override puts it first at the top score."""
    vectors = np.array([[0.0, 1.0], [0.6, 0.8], [1.0, 0.0], [0.8, 0.6]], dtype=np.float32)
    config = HybridConfig(rrf_k=10, weights=(10.0, 1.0))
    index = PassageIndex([Passage(f"p{i}", f"d{i}", t) for i, t in enumerate(NUMBER_TEXTS)], vectors, config)
    query, qv = "what is 555-0177", np.array([1.0, 0.0], dtype=np.float32)
    assert index.bm25.postings["0177"] == {0} and index.bm25.postings["555"] == {0, 1}
    lists = [index.dense_ranking(qv, 20), index.bm25_ranking(query, 20), index.phonetic_ranking(query, 20)]
    assert [i for i, _ in lists[1]] == [0] and [i for i, _ in lists[2]][0] == 0
    assert [i for i, _ in rrf_fuse(lists[:2], k=10, weights=(10.0, 1.0))] == [2, 3, 0, 1]  # the bug
    assert [i for i, _ in rrf_fuse(lists, k=10, weights=(10.0, 1.0, 1.0))] == [2, 0, 3, 1]
    hybrid = index.ranking(query, "hybrid", qv)
    assert hybrid == [(0, pytest.approx(10 / 11)), (2, pytest.approx(10 / 11)), (3, pytest.approx(10 / 12)),
                      (1, pytest.approx(10 / 13))]
    assert [i for i, _ in index.ranking(query, "hybrid_phonetic", qv)] == [0, 2, 3, 1]
    # "555" alone is in two passages (a common token): no override, plain RRF order
    assert index.ranking("what is 555", "hybrid", qv) == rrf_fuse(
        [index.dense_ranking(qv, 20), index.bm25_ranking("what is 555", 20)], k=10, weights=(10.0, 1.0))


def test_bm25s_engine_scores_by_hand_and_ranks_like_rank_bm25():
    # bm25s scores as Lucene does: IDF ln(1 + (N - n + 0.5) / (n + 0.5)) and tf / (tf + k1 (1 - b + b dl / avgdl)),
    # without Okapi's (k1 + 1) factor: "parking" in 1 of 4 passages, tf 1, dl 4, avgdl 5.
    idf = math.log(1 + 3.5 / 1.5)
    expected = idf * 1 / (1 + 1.5 * (1 - 0.75 + 0.75 * 4 / 5))
    assert expected == pytest.approx(0.529219, abs=1e-6)
    sparse = BM25Index(TEXTS, engine="bm25s")
    np.testing.assert_allclose(sparse.get_scores("parking"), [0, 0, expected, 0], rtol=1e-5)
    # "the" (2 of 4) still counts a little under Lucene's IDF, unlike Okapi's ln(2.5 / 2.5) = 0
    assert sparse.get_scores("the")[[1, 3]].tolist() == [0.0, 0.0] and sparse.get_scores("the")[0] > 0
    assert sparse.postings == BM25Index(TEXTS).postings
    assert sparse.top_k("refills on saturday", 2)[0][0] in (0, 1)
    np.testing.assert_array_equal(sparse.get_scores("zebra crossing"), np.zeros(4))  # no known token: no error
    np.testing.assert_array_equal(sparse.get_scores(""), np.zeros(4))
    # passages with no token at all ("Yes." once stopwords are gone) are scored 0 on either engine, never a crash
    for engine in ("rank_bm25", "bm25s"):
        np.testing.assert_array_equal(BM25Index(["yes", "no"], lambda t: [], engine=engine).get_scores("yes"), [0, 0])
        empty_one = BM25Index(["the cat", "", "a dog sat"], engine=engine)
        assert empty_one.get_scores("cat dog")[1] == 0 and "\x00" not in empty_one.vocabulary


def test_bm25_engine_setting_reaches_both_bm25_lists():
    idx = toy_index(HybridConfig(bm25_engine="bm25s"))
    assert idx.bm25.engine == "bm25s" and idx.phonetic.engine == "bm25s"
    assert [i for i, _ in idx.bm25_ranking("free parking")] == [2]
    with pytest.raises(ValueError, match="BM25 engine must be one of"):
        BM25Index(TEXTS, engine="lucene")
    with pytest.raises(ValueError, match="retrieval.bm25_engine must be one of"):
        HybridConfig(bm25_engine="lucene")


def test_bm25s_on_the_clinic_kb_agrees_with_rank_bm25():
    from rag.retrieval.chunk import chunk_folder
    from rag.retrieval.search import DEFAULT_KB
    from rag.voice.queries import load_queries

    texts = [p.text for p in chunk_folder(DEFAULT_KB)]
    qs = load_queries(DEFAULT_KB.parents[0] / "queries.jsonl")
    okapi, sparse = BM25Index(texts), BM25Index(texts, engine="bm25s")
    tops = [(okapi.top_k(q, 1)[0][0], sparse.top_k(q, 1)[0][0]) for q in [x["spoken"] for x in qs] + [x["asr"] for x in qs]]
    assert sum(a == b for a, b in tops) == 31 and len(tops) == 32  # the two IDFs differ on one recogniser transcript


def test_a_gate_fitted_on_one_bm25_engine_is_refused_on_the_other():
    import json
    from pathlib import Path

    from rag.voice.gate import Gate, GateMismatch

    good = json.loads((Path(__file__).resolve().parents[1] / "models" / "gate.json").read_text())
    assert good["retrieval"]["bm25_engine"] == "rank_bm25"
    with pytest.raises(GateMismatch, match="bm25_engine 'rank_bm25' there, 'bm25s' here"):
        Gate.from_dict(good).check(good["signal"], good["embedder"], {**good["retrieval"], "bm25_engine": "bm25s"})


def test_snowball_stemmer_in_bm25():
    """HybridConfig.stemmer: BM25 over Snowball stems ("shots" = "shot", "parking" = "park"); none keeps the words."""
    texts = ["You do not need an appointment for a flu shot.", "Flu shots are free for patients over 65 years old.",
             "Parking in the clinic lot costs $2 an hour.", "A blood test costs $45.", "We are closed on Sunday."]
    vectors = np.eye(5, dtype=np.float32)
    plain = PassageIndex([Passage(str(i), str(i), t) for i, t in enumerate(texts)], vectors, HybridConfig())
    stemmed = PassageIndex(plain.passages, vectors, HybridConfig(stemmer="snowball"))
    assert plain.tokenize("Flu shots, parking") == ["flu", "shots", "parking"]
    assert stemmed.tokenize("Flu shots, parking") == ["flu", "shot", "park"]
    query = "flu shot free seniors"
    assert [i for i, _ in plain.ranking(query, "bm25", vectors[0])][0] == 0     # "flu shot" matches, "shots" not
    assert [i for i, _ in stemmed.ranking(query, "bm25", vectors[0])][0] == 1   # flu + shot + free
    with pytest.raises(ValueError, match="stemmer must be one of"):
        HybridConfig(stemmer="porter")


def test_stemming_from_many_threads_at_once_gives_each_its_own_words():
    """A snowballstemmer object keeps the word it is stemming in itself: one shared by the load stage's 16 callers
    (each building a sentence ranking at once) crashed a turn with IndexError inside stemWord (session 54).
    `rag.retrieval.search.stem_words` keeps one stemmer per thread."""
    from concurrent.futures import ThreadPoolExecutor

    from rag.retrieval.search import stem_words

    words = {t: [f"{w}{'s' * (t % 3)}" for w in ("parking", "vaccinations", "appointments", "grooming", "boarding",
                                                   "prescriptions", "cleanings", "x", "walking")] * 300
             for t in range(8)}
    expected = {t: stem_words(ws) for t, ws in words.items()}   # one thread
    with ThreadPoolExecutor(8) as pool:
        got = dict(zip(words, pool.map(lambda t: stem_words(words[t]), words)))
    assert got == expected
    assert expected[0][:3] == ["park", "vaccin", "appoint"]


def test_named_by_asked_from_many_threads_at_once_is_never_half_built():
    """`PassageIndex.named_by` (phone numbers and codes -> passages) is built on first use by whichever caller comes
    first; a thread asking while another built it read a half-built map and missed the passage naming the number
    (session 54). Now it is built whole, then published."""
    from concurrent.futures import ThreadPoolExecutor

    passages = [Passage(f"p{i}", f"d{i}", f"Call 555-{i:04d} for desk {i}.") for i in range(6000)]
    for _ in range(5):
        index = PassageIndex(passages, np.zeros((len(passages), 4), dtype=np.float32))
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda _: index.named_by.get("5555999"), range(8)))
        assert got == [[5999]] * 8
