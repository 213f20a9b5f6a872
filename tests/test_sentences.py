"""Sentences embedded once at index time (issue 20): same picks as embedding them per question."""
import numpy as np
import pytest

from rag import config
from rag.voice.answer import decide, retrieve
from rag.retrieval.chunk import load_kb
from rag.io import InputError
from rag.eval.evaluate import embed_texts
from rag.retrieval.sentences import SentenceIndex

from conftest import ROOT


def test_rows_in_document_order_with_unit_vectors(small_kb):
    index = SentenceIndex.build(load_kb(small_kb))
    hours = [s for s, _ in index.of("kb-hours")]
    assert hours == ["On weekdays we are open from 8:30 a.m. to 6 p.m.",
                     "On Saturday we are open from 9 a.m. to 1 p.m.", "We are closed on Sunday."]
    assert index.vectors.shape == (len(index.rows), 384)
    np.testing.assert_allclose(np.linalg.norm(index.vectors, axis=1), 1.0, atol=1e-5)
    assert index.of("not-a-doc") == []


def test_save_load_round_trip(small_kb, tmp_path):
    index = SentenceIndex.build(load_kb(small_kb))
    index.save(tmp_path / "s.jsonl", tmp_path / "s.npy")
    back = SentenceIndex.load(tmp_path / "s.jsonl", tmp_path / "s.npy")
    assert back.rows == index.rows
    np.testing.assert_array_equal(back.vectors, index.vectors)
    (tmp_path / "s.jsonl").write_text('{"doc": "a", "text": "x"}\n')
    with pytest.raises(InputError, match=r"s.jsonl:1: missing field\(s\) position"):
        SentenceIndex.load(tmp_path / "s.jsonl", tmp_path / "s.npy")


@pytest.mark.parametrize("kb_dir, queries", [
    ("fixtures/voice/kb", "fixtures/voice/queries.jsonl"),
    ("fixtures/transfer/kb", "fixtures/transfer/queries_clean.jsonl"),
])
def test_precomputed_sentences_give_the_query_time_picks(params, kb_dir, queries):
    """Every fixture question, LLM down: what is said with the KB's SentenceIndex equals what is said when the
    retrieved documents are split and embedded at question time."""
    from rag.voice.queries import load_queries
    from rag.retrieval.search import PassageIndex

    kb = load_kb(ROOT / kb_dir)
    index = PassageIndex.from_folder(ROOT / kb_dir, config.hybrid_config(params))
    settings, rules = config.answer_settings(params, tau=0.0), config.verify_rules(params)
    texts = {q["id"]: q["asr"].lower() for q in load_queries(ROOT / queries)}
    vectors = embed_texts(texts)
    sentences = SentenceIndex.build(kb)
    said = {}
    for qid, text in texts.items():
        row = {"id": qid, "query": text, "retrieved": retrieve(index, text, vectors[qid], settings)[1],
               "gated": False, "answer": None,
               "source": None, "error": "unreachable"}
        precomputed = decide(row, kb, vectors[qid], settings, rules, sentences)
        assert precomputed == decide(row, kb, vectors[qid], settings, rules), qid
        said[precomputed["status"]] = said.get(precomputed["status"], 0) + 1
    assert said.get("extractive", 0) >= len(texts) // 2  # the comparison covers real picks, not only refusals


def test_contexts_asked_from_many_threads_at_once_are_never_half_built():
    """`SentenceIndex.contexts` builds its map on first use; a KB's index is shared by every caller of a process
    (the load stage's 16 threads), and a thread asking while another was building it read a half-built map: the
    sentence before came back "" (session 54). Now the map is built whole, then published."""
    from concurrent.futures import ThreadPoolExecutor

    rows = [(f"doc{d}", i, f"sentence {i} of document {d}.") for d in range(400) for i in range(25)]
    last = [(f"sentence 24 of document {d}.", f"doc{d}") for d in range(400)]
    expected = [f"sentence 23 of document {d}." for d in range(400)]
    for _ in range(5):
        index = SentenceIndex(rows, np.zeros((len(rows), 4), dtype=np.float32))
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda _: index.contexts(last), range(8)))
        assert all(g == expected for g in got)
