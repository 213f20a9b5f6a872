"""HeySQuAD dev-common: loading the three files, the seeded sample, a sampled retrieval run, ASR penalty."""
import json

import pytest

from rag.bench.compare import evaluate_matrix
from rag.retrieval.embed import passage_embedder, query_embedder
from rag.bench.heysquad import SOURCES, as_passages, as_transcripts, asr_penalty, load_heysquad, sample
from rag.io import InputError
from rag.voice.queries import raw_queries, rewrite_queries
from rag.retrieval.search import PassageIndex


@pytest.fixture(scope="module")
def heysquad():
    from conftest import public_data

    return public_data("heysquad")


def test_three_files_share_questions_and_paragraphs(heysquad):
    passages, queries = load_heysquad(heysquad)
    assert (len(passages), len(queries)) == (311, 1002)
    assert queries[0] == {"id": "5733a5f54776f41900660f48", "relevant": ["0_0"], "answerable": True,
                          "typed": "What year was Casimir Pulaski born in Warsaw?",
                          "human": "what year was cassimir koloski born in warsaw",
                          "machine": "what year was casimir pulaski born in warsaw", "answers": ["1745"]}


def test_seeded_sample_and_a_sampled_run(heysquad):
    passages, queries = load_heysquad(heysquad)
    assert sample(passages, queries, 0, 0) == (passages, queries)
    with pytest.raises(ValueError):
        sample(passages, queries, 312, 0)
    p8, q8 = sample(passages, queries, 8, 0)
    assert (p8, q8) == sample(passages, queries, 8, 0)
    # random.Random(0).sample(range(311), 8) = [20, 132, 155, 197, 207, 215, 248, 261] (sorted)
    assert [p["_id"] for p in p8] == ["1_0", "6_12", "7_15", "9_17", "10_7", "10_15", "12_8", "13_1"]
    assert len(q8) == 32 and {q["relevant"][0] for q in q8} == {p["_id"] for p in p8}

    index = PassageIndex(as_passages(p8), passage_embedder().embed([p["text"] for p in p8]))
    for source in SOURCES:
        spoken = as_transcripts(q8, source)
        matrix = evaluate_matrix(index, q8, {"raw": raw_queries(spoken), "rewritten": rewrite_queries(spoken)},
                                 ks=(1, 10))
        for by_mode in matrix.values():
            # 8 passages < 10: dense and hybrid list all of them, so the gold one is always in the top 10.
            assert by_mode["dense"]["recall@10"] == by_mode["hybrid"]["recall@10"] == 1.0
            assert all(0.0 < m["mrr@10"] <= 1.0 for m in by_mode.values())


def squad(qid, question, context="Warsaw is the capital of Poland."):
    return {"data": [{"title": "Warsaw", "paragraphs": [
        {"context": context, "qas": [{"id": qid, "question": question, "answers": []}]}]}]}


def test_mismatched_files_are_refused(tmp_path):
    for name, file in SOURCES.items():
        (tmp_path / file).write_text(json.dumps(squad("q1", f"{name} question")))
    passages, queries = load_heysquad(tmp_path)
    assert queries == [{"id": "q1", "relevant": ["0_0"], "answerable": True, "typed": "typed question",
                        "human": "human question", "machine": "machine question", "answers": []}]
    (tmp_path / SOURCES["human"]).write_text(json.dumps(squad("q2", "other id")))
    with pytest.raises(InputError, match="human-transcribed.*question ids"):
        load_heysquad(tmp_path)
    (tmp_path / SOURCES["human"]).write_text(json.dumps(squad("q1", "x", context="Another paragraph.")))
    with pytest.raises(InputError, match="human-transcribed.*paragraphs differ"):
        load_heysquad(tmp_path)


def test_asr_penalty_by_hand():
    matrix = {"typed": {"raw": {"dense": {"mrr@10": 0.8}, "bm25": {"mrr@10": 0.5}}},
              "human": {"raw": {"dense": {"mrr@10": 0.7}, "bm25": {"mrr@10": 0.55}}}}
    assert asr_penalty(matrix, "human") == {"raw": {"dense": 0.125, "bm25": -0.1}}  # (0.8-0.7)/0.8, (0.5-0.55)/0.5


def test_sentence_picks():
    from rag.bench.heysquad import selective_accuracy, sentence_picks
    from rag.retrieval.search import HybridConfig
    from rag.retrieval.sentences import SentenceIndex
    from rag.voice.verify import DEFAULT_VERIFY

    kb = {"p": "The bridge opened in 1932. It is painted red. Ferries still cross the bay."}
    sentences = ["The bridge opened in 1932.", "It is painted red.", "Ferries still cross the bay."]
    queries = [{"id": "a", "answers": ["1932"]}, {"id": "b", "answers": ["Red"]}, {"id": "c", "answers": ["blue"]},
               {"id": "d", "answers": ["x"]}]
    texts = {"a": "when did the bridge open", "b": "what colour is the paint", "c": "who runs the ferries",
             "d": "how much is a ticket"}
    emb = query_embedder()
    vectors = dict(zip(texts, emb.embed(list(texts.values()))))
    index = SentenceIndex.build(kb)
    assert [s for s, _ in index.of("p")] == sentences
    svec = dict(index.of("p"))
    docs = {"a": ["p"], "b": ["p"], "c": ["p"], "d": []}
    picks = sentence_picks(queries, texts, vectors, docs, index, DEFAULT_VERIFY, "dense", HybridConfig())
    assert [(r["id"], r["hit"], r["ceiling"], r["typed"]) for r in picks] == [
        ("a", True, True, False), ("b", True, True, False), ("c", False, False, False), ("d", False, False, True)]
    assert abs(picks[0]["cosine"] - float(svec[sentences[0]] @ vectors["a"])) < 1e-6
    assert picks[3]["cosine"] is None  # no candidate sentence: refused at any min cosine
    assert selective_accuracy(picks, -1.0)["said"] == 0.75
    with pytest.raises(InputError, match="query a: answers must be a list of non-empty strings"):
        sentence_picks([{"id": "a", "answers": "1932"}], texts, vectors, docs, index, DEFAULT_VERIFY, "dense",
                       HybridConfig())


def test_selective_accuracy_by_hand():
    from rag.bench.heysquad import selective_accuracy

    picks = [{"hit": True, "cosine": 0.6}, {"hit": False, "cosine": 0.5}, {"hit": True, "cosine": 0.2},
             {"hit": False, "cosine": 0.1}]
    assert selective_accuracy(picks, 0.0) == {"said": 1.0, "hit_said": 0.5, "hit_refused": 0.0, "wrong_said": 2,
                                              "right_refused": 0}
    assert selective_accuracy(picks, 0.25) == {"said": 0.5, "hit_said": 0.5, "hit_refused": 0.5, "wrong_said": 1,
                                               "right_refused": 1}
    assert selective_accuracy(picks, 0.15) == {"said": 0.75, "hit_said": round(2 / 3, 6), "hit_refused": 0.0,
                                               "wrong_said": 1, "right_refused": 0}
    assert selective_accuracy([], 0.3)["said"] == 0.0
