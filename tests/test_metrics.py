"""evaluate_run against hand-computed recall/MRR/nDCG/Hit, tie order, and the train-only fusion search."""
import math

import pytest

from rag.retrieval.learned_fusion import fuse, fuse_convex, min_max, search_fusion, weight_grid
from rag.eval.metrics import evaluate_run, strict_order, to_run

L3 = 1 / math.log2(3)  # DCG discount at rank 2 = 0.63093
L5 = 1 / math.log2(5)  # DCG discount at rank 4 = 0.43068

QRELS = {"q1": {"d1": 1}, "q2": {"d1": 1, "d2": 1}, "q3": {"d5": 1}}
RUN = {
    "q1": {"d2": 0.9, "d1": 0.8, "d3": 0.7},               # relevant at rank 2
    "q2": {"d1": 0.9, "d3": 0.8, "d4": 0.7, "d2": 0.6},    # relevant at ranks 1 and 4
    # q3 has no run: scores 0 everywhere
    "q9": {"d1": 1.0},                                      # not in qrels: ignored
}


def test_three_query_toy_example_by_hand():
    m = evaluate_run(QRELS, RUN, ks=(1, 5, 10))
    # recall@1: q1 0, q2 1/2, q3 0
    assert m["recall@1"] == pytest.approx(0.5 / 3)
    # recall@5: q1 1, q2 2/2, q3 0
    assert m["recall@5"] == pytest.approx(2 / 3)
    # MRR@10: 1/2, 1, 0
    assert m["mrr@10"] == pytest.approx(1.5 / 3)
    assert m["mrr@1"] == pytest.approx(1 / 3)
    # nDCG@10: q1 = (1/log2 3) / 1; q2 = (1 + 1/log2 5) / (1 + 1/log2 3); q3 = 0
    assert m["ndcg@10"] == pytest.approx((L3 + (1 + L5) / (1 + L3)) / 3)
    assert m["ndcg@10"] == pytest.approx(0.502715, abs=1e-6)
    # nDCG@1: q2 has a relevant passage first (1/1)
    assert m["ndcg@1"] == pytest.approx(1 / 3)
    # Hit@k: any relevant in the top k
    assert m["hit@1"] == pytest.approx(1 / 3)
    assert m["hit@5"] == pytest.approx(2 / 3)
    assert sorted(m) == sorted(f"{n}@{k}" for n in ("recall", "mrr", "ndcg", "hit") for k in (1, 5, 10))


def test_graded_relevance_uses_linear_gain():
    # ranking b (grade 1), a (grade 2): DCG = 1 + 2/log2 3; ideal = 2 + 1/log2 3
    m = evaluate_run({"q": {"a": 2, "b": 1}}, {"q": {"b": 2.0, "a": 1.0}}, ks=(10,))
    assert m["ndcg@10"] == pytest.approx((1 + 2 * L3) / (2 + L3))
    assert m["ndcg@10"] == pytest.approx(0.85972, abs=1e-5)


def test_ties_are_broken_by_passage_id_ascending():
    # trec_eval alone would order equal scores c, b, a (id descending) and give MRR 1/3.
    m = evaluate_run({"q": {"a": 1}}, {"q": {"c": 1.0, "b": 1.0, "a": 1.0}}, ks=(1, 10))
    assert m["mrr@10"] == 1.0 and m["recall@1"] == 1.0
    m = evaluate_run({"q": {"b": 1}}, {"q": {"c": 1.0, "b": 1.0, "a": 1.0}}, ks=(1, 10))
    assert m["mrr@10"] == 0.5 and m["recall@1"] == 0.0
    assert strict_order({"c": 1.0, "b": 2.0, "a": 1.0}) == ["b", "a", "c"]


def test_empty_runs_and_queries_without_relevant_passages():
    assert evaluate_run({"q": {"a": 1}}, {}, ks=(1,)) == {"recall@1": 0.0, "mrr@1": 0.0, "ndcg@1": 0.0, "hit@1": 0.0}
    assert evaluate_run({"q": {"a": 1}}, {"q": {}}, ks=(1,))["hit@1"] == 0.0
    # q0 has only a non-relevant judgement: skipped, so the mean is over q alone
    m = evaluate_run({"q": {"a": 1}, "q0": {"a": 0}}, {"q": {"a": 1.0}}, ks=(1,))
    assert m["recall@1"] == 1.0
    with pytest.raises(ValueError):
        evaluate_run({"q0": {"a": 0}}, {}, ks=(1,))
    with pytest.raises(ValueError):
        evaluate_run({"q": {"a": 1}}, {}, ks=(0,))


def test_to_run_keeps_the_ranking_order_including_ties():
    run = to_run({"q": [(2, 5.0), (0, 5.0), (1, 4.0)]}, ["p0", "p1", "p2"])
    assert run == {"q": {"p2": 3.0, "p0": 2.0, "p1": 1.0}}


def test_weight_grid_merges_scaled_duplicates():
    assert weight_grid([0, 0.5, 1], 2) == [(1.0, 1.0), (1.0, 0.5), (1.0, 0.0), (0.5, 1.0), (0.0, 1.0)]
    # {0, .25, 1}^3 with a 1 somewhere: 3^3 - 2^3 = 19 directions
    assert len(weight_grid([0, 0.25, 1], 3)) == 19
    with pytest.raises(ValueError):
        weight_grid([-1, 1], 2)


def test_fuse_drops_zero_weight_lists():
    a = {"q": [(0, 9.0), (1, 8.0)]}
    b = {"q": [(1, 9.0), (2, 8.0)]}
    assert [i for i, _ in fuse([a, b], 60, [1.0, 0.0], 10)["q"]] == [0, 1]
    # equal weights, k=1: passage 1 gets 1/3 + 1/2, passage 0 gets 1/2, passage 2 gets 1/3
    fused = fuse([a, b], 1, [1.0, 1.0], 2)["q"]
    assert [i for i, _ in fused] == [1, 0]
    assert fused[0][1] == pytest.approx(1 / 3 + 1 / 2)


def test_search_fusion_picks_the_best_train_setting_by_hand():
    pids = ["p0", "p1", "p2"]
    qrels = {"q1": {"p0": 1}, "q2": {"p1": 1}}
    a = {"q1": [(0, 3.0), (1, 2.0), (2, 1.0)], "q2": [(1, 3.0), (0, 2.0), (2, 1.0)]}  # right on both
    b = {"q1": [(0, 3.0), (1, 2.0), (2, 1.0)], "q2": [(0, 3.0), (1, 2.0), (2, 1.0)]}  # right on q1 only
    # (1,1): q2 gives p0 and p1 the same 1/61 + 1/62, the tie goes to p0 -> recall@1 = 1/2
    best, table = search_fusion({"s": [a, b]}, qrels, pids, weight_grid([0, 1], 2), [60], 10, "recall@1")
    assert [(r["weights"], r["recall@1"]) for r in table] == [([1.0, 1.0], 0.5), ([1.0, 0.0], 1.0), ([0.0, 1.0], 0.5)]
    assert best == {"setting": "s", "rrf_k": 60, "weights": [1.0, 0.0], "recall@1": 1.0}
    # ties keep the earlier candidate: with only b available twice, the first setting wins
    best, _ = search_fusion({"x": [b], "y": [b]}, qrels, pids, [(1.0,)], [60], 10, "recall@1")
    assert best["setting"] == "x"
    with pytest.raises(ValueError):
        search_fusion({"s": [a]}, qrels, pids, [(1.0,)], [60], 10, "precision@1")


def test_min_max_rescales_a_ranking_to_the_unit_interval():
    assert min_max([(4, 12.0), (2, 8.0), (7, 2.0)]) == {4: 1.0, 2: 0.6, 7: 0.0}
    assert min_max([(1, 0.5), (3, 0.5)]) == {1: 1.0, 3: 1.0}   # all equal: each 1
    assert min_max([]) == {}


def test_fuse_convex_adds_weighted_normalised_scores_where_rrf_sees_only_ranks():
    # BM25 puts p0 far ahead of p1; the dense list has p1 barely ahead of p0
    bm25 = {"q": [(0, 20.0), (1, 10.0), (2, 0.0)]}
    dense = {"q": [(1, 0.80), (0, 0.79), (3, 0.30)]}
    # min-max: bm25 p0 1, p1 0.5, p2 0; dense p1 1, p0 0.98, p3 0; equal weights: p0 1.98, p1 1.5, p2 0, p3 0
    fused = fuse_convex([bm25, dense], [1.0, 1.0], 10)["q"]
    assert [i for i, _ in fused] == [0, 1, 2, 3]
    assert fused[0][1] == pytest.approx(1 + 0.49 / 0.5)
    # RRF (k 1) cannot tell: p0 and p1 each get 1/2 + 1/3, the tie goes to the lower index
    assert [i for i, _ in fuse([bm25, dense], 1, [1.0, 1.0], 2)["q"]] == [0, 1]
    # weight 0 drops a list; depth cuts; a wrong number of weights is refused
    assert [i for i, _ in fuse_convex([bm25, dense], [0.0, 1.0], 2)["q"]] == [1, 0]
    with pytest.raises(ValueError, match="2 lists but 1 weights"):
        fuse_convex([bm25, dense], [1.0], 10)


def test_search_fusion_convex_ignores_rrf_k_and_finds_the_weights_by_hand():
    pids = ["p0", "p1", "p2"]
    qrels = {"q1": {"p1": 1}}
    a = {"q1": [(0, 3.0), (1, 2.9), (2, 0.0)]}   # p1 a close second
    b = {"q1": [(1, 1.0), (2, 0.9), (0, 0.0)]}   # p1 first
    best, table = search_fusion({"s": [a, b]}, qrels, pids, weight_grid([0, 1], 2), [1, 60], 10, "recall@1",
                                fusion="convex")
    # (1,1): p1 0.967 + 1 beats p0 1 + 0; (1,0): p0; (0,1): p1. The k grid is not walked: 3 rows
    assert [(r["weights"], r["recall@1"], r["rrf_k"]) for r in table] == [([1.0, 1.0], 1.0, None),
                                                                          ([1.0, 0.0], 0.0, None),
                                                                          ([0.0, 1.0], 1.0, None)]
    assert best["weights"] == [1.0, 1.0]
    with pytest.raises(ValueError, match="fusion must be"):
        search_fusion({"s": [a]}, qrels, pids, [(1.0,)], [60], 10, "recall@1", fusion="combsum")


def test_bootstrap_interval_of_a_rate():
    from rag.eval.intervals import bootstrap_interval

    x = [1] * 10 + [0] * 40                       # rate 0.2 over 50 questions: normal approx. 0.2 +- 0.111
    lo, hi = bootstrap_interval(x)
    assert 0.08 <= lo <= 0.12 and 0.30 <= hi <= 0.34
    assert bootstrap_interval(x) == (lo, hi)      # seeded: repeatable
    assert bootstrap_interval(x, confidence=0.5)[1] < hi
    assert bootstrap_interval([0] * 50) == (0.0, 0.0) and bootstrap_interval([1, 1]) == (1.0, 1.0)
    assert bootstrap_interval([]) == (0.0, 0.0)   # never NaN
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_interval(x, confidence=95)
