"""The KB served from PostgreSQL + pgvector gives the chain the same passages as the in-process index (issue 16)."""
import json

import numpy as np
import pytest

from rag import config
from rag.__main__ import main
from rag.retrieval.kb_cache import load_into_store, open_kb
from rag.retrieval.pgvector import PgVectorStore
from rag.voice.queries import load_queries, rewrite_queries
from rag.eval.evaluate import embed_texts

from conftest import ROOT

DOWN = "http://127.0.0.1:9"


def test_pgvector_ranks_the_fixture_questions_as_the_in_process_index(params, postgres_server, tmp_path):
    hc = config.hybrid_config(params)
    for kb_dir, queries in (("fixtures/voice/kb", "fixtures/voice/queries.jsonl"),
                            ("fixtures/transfer/kb", "fixtures/transfer/queries_clean.jsonl")):
        local = open_kb(ROOT / kb_dir, hc, tmp_path)
        assert load_into_store(local, postgres_server.url) == len(local.index.passages)
        served = open_kb(ROOT / kb_dir, hc, tmp_path, store=postgres_server.url)
        assert type(served.index.dense).__name__ == "PgDenseIndex"
        texts = rewrite_queries(load_queries(ROOT / queries), config.rewrite_rules(params))
        vectors = embed_texts(texts)
        for qid, text in texts.items():
            v = vectors[qid]
            assert served.index.dense.best(v) == pytest.approx(local.index.dense.best(v), abs=1e-6), qid  # float32 sums
            assert ([d for d, _ in served.index.search(text, 3, "hybrid_phonetic", v)]
                    == [d for d, _ in local.index.search(text, 3, "hybrid_phonetic", v)]), qid


def test_rag_index_then_ask_through_the_store(small_kb, postgres_server, tmp_path, monkeypatch, capsys):
    cache = str(tmp_path / "cache")
    assert main(["index", "--kb", str(small_kb), "--store", postgres_server.url, "--cache-dir", cache]) == 0
    assert "passages loaded" in capsys.readouterr().out
    monkeypatch.setenv("RAG_KB_STORE", postgres_server.url)
    assert main(["ask", "what time do you open on saturday", "--kb", str(small_kb), "--llm-url", DOWN,
                 "--cache-dir", cache, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["say"] == "On Saturday we are open from 9 a.m. to 1 p.m."
    # a KB never loaded, and a store that is down: one line each, exit 1
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.md").write_text("# A\n\nParking is free.\n")
    assert main(["ask", "is parking free", "--kb", str(other), "--llm-url", DOWN, "--cache-dir", cache]) == 1
    assert "is not in the store: load it with `rag index" in capsys.readouterr().err
    monkeypatch.setenv("RAG_KB_STORE", "postgresql://u:secret@127.0.0.1:1/db")
    assert main(["ask", "is parking free", "--kb", str(small_kb), "--llm-url", DOWN, "--cache-dir", cache]) == 1
    err = capsys.readouterr().err
    assert "unreachable" in err and "secret" not in err
    assert main(["index", "--kb", str(small_kb), "--store", "redis://x", "--cache-dir", cache]) == 2


def test_reloading_replaces_the_rows(postgres_server, tmp_path, small_kb):
    kb = open_kb(small_kb, cache_dir=tmp_path)
    store = PgVectorStore(postgres_server.url)
    try:
        store.load("k", kb.index.passages, kb.index.vectors)
        store.load("k", kb.index.passages[:2], kb.index.vectors[:2])
        assert store.count("k") == 2 and store.dense("k").top_k(kb.index.vectors[1], 5)[0][0] == 1
        assert store.hnsw_bytes("k") >= 8192 and store.hnsw_bytes("never loaded") == 0  # at least one 8 KiB page
    finally:
        store.close()


def test_the_scale_bench_measures_pgvector_against_exact(postgres_server):
    from rag.bench.scale import paraphrase_variants, pgvector_rows

    anchors = paraphrase_variants(np.eye(384, dtype=np.float32)[:40], 40, 0.0)
    both = paraphrase_variants(anchors, 520, 0.03)
    row = pgvector_rows(postgres_server.url, both[:500], both[500:], ef_search=64)
    assert row["recall_at_10"] >= 0.95 and row["p50_ms"] > 0 and row["load_and_build_s"] > 0
    assert 500 * 384 * 4 <= row["bytes"] < 500 * 384 * 4 * 4  # the graph holds every float32 vector, plus links


def test_the_clinic_and_vet_chains_say_the_same_through_pgvector(params, postgres_server, tmp_path):
    import copy

    from rag.voice.gate import Gate
    from rag.voice.pipeline import run_chain

    gate = Gate.load(ROOT / "models" / "gate.json")
    for kb_dir, queries in (("fixtures/voice/kb", "fixtures/voice/queries.jsonl"),
                            ("fixtures/transfer/kb", "fixtures/transfer/queries_noisy.jsonl")):
        p = copy.deepcopy(params)
        p["llm"]["url"] = DOWN
        local = run_chain(ROOT / kb_dir, ROOT / queries, p, gate, tmp_path)
        load_into_store(open_kb(ROOT / kb_dir, config.hybrid_config(p), tmp_path), postgres_server.url)
        p["retrieval"]["store"] = postgres_server.url
        served = run_chain(ROOT / kb_dir, ROOT / queries, p, gate, tmp_path)
        keys = ("status", "say", "source", "reason")
        assert [{k: a[k] for k in keys} for a in served["answers"]] == [{k: a[k] for k in keys} for a in local["answers"]]
        assert served["final"] == local["final"]


def test_a_small_kb_beside_a_large_one_keeps_its_ranking(params, postgres_server, tmp_path):
    """Each KB has its own HNSW graph (a partition): the clinic loaded beside 8,000 rows of another KB that crowd
    its region of the space (noisy copies of its own passage vectors) still gets the in-process exact top 10 for
    every fixture question. With one graph for all KBs and a ``WHERE kb =`` filter, it did not."""
    from rag.bench.scale import paraphrase_variants
    from rag.retrieval.chunk import Passage

    hc = config.hybrid_config(params)
    local = open_kb(ROOT / "fixtures/voice/kb", hc, tmp_path)
    crowd = paraphrase_variants(local.index.vectors, 8_000, 0.01)
    store = PgVectorStore(postgres_server.url)
    try:
        store.load("crowd", [Passage(str(i), "crowd", "") for i in range(len(crowd))], crowd)
        store.load("clinic", local.index.passages, local.index.vectors)
        served = store.dense("clinic", 64)
        texts = rewrite_queries(load_queries(ROOT / "fixtures/voice/queries.jsonl"), config.rewrite_rules(params))
        vectors = embed_texts(texts)
        same = [[i for i, _ in served.top_k(vectors[q], 10)] == [i for i, _ in local.index.dense.top_k(vectors[q], 10)]
                for q in texts]
        assert sum(same) == len(texts)
    finally:
        store.close()


def test_a_store_with_the_old_one_graph_layout_is_refused(postgres_server):
    import psycopg

    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA old_layout")
        conn.execute("CREATE TABLE old_layout.kb_passages (kb text, pos integer)")
    try:
        with pytest.raises(LookupError, match="old one-graph layout.*DROP TABLE kb_passages"):
            PgVectorStore(postgres_server.url + ("&" if "?" in postgres_server.url else "?")
                          + "options=-csearch_path%3Dold_layout")
    finally:
        with psycopg.connect(postgres_server.url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA old_layout CASCADE")
