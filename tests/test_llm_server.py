"""Integration with the real llama.cpp server (xllamacpp + the packaged SmolLM2-135M)."""
import os
import signal
import threading
from dataclasses import replace

import pytest

from conftest import ROOT, gone_within
from rag import config
from rag.retrieval.chunk import load_kb
from rag.eval.evaluate import embed_texts
from rag.llm.server import LocalServer
from rag.voice.queries import load_queries, rewrite_queries
from rag.voice.answer import answer_row, decide
from rag.retrieval.search import PassageIndex

KB = ROOT / "fixtures" / "voice" / "kb"


@pytest.fixture(scope="module")
def fixture_set(params):
    queries = load_queries(ROOT / "fixtures" / "voice" / "queries.jsonl")
    rewritten = rewrite_queries(queries, config.rewrite_rules(params))
    return PassageIndex.from_folder(KB), load_kb(KB), rewritten, embed_texts(rewritten)


def test_json_valid_and_source_in_enum(params, fixture_set):
    index, kb, rewritten, vectors = fixture_set
    # A generous timeout: this test checks the JSON contract, not speed (2 loaded cores are slow).
    settings = replace(config.answer_settings(params, tau=0.0), timeout_s=120.0, deadline_s=0.0)
    with LocalServer() as server:
        rows = [answer_row(q, rewritten[q], index, vectors[q], 1.0, settings, kb, server.url)
                for q in list(rewritten)[:6]]
    assert server.proc.poll() is not None  # stopped by PID on exit
    for r in rows:
        assert r["error"] is None, (r["id"], r["error"], r["detail"])
        assert r["source"] in r["retrieved"] + ["none"]
        assert r["first_token_ms"] > 0 and r["total_ms"] >= r["first_token_ms"]
        if r["source"] == "none":  # declined: the call was closed after the source (no server timings then)
            assert r["answer"] == "" and r["timings"] is None, r
        else:
            assert r["answer"] and r["timings"]["predicted_n"] > 0, r


def test_killing_the_server_mid_run_says_nothing_unverified(params, fixture_set):
    index, kb, rewritten, vectors = fixture_set
    settings = config.answer_settings(params, tau=0.0)
    server = LocalServer().start()
    try:
        # Kill it (SIGKILL, by PID) while the first request is being generated.
        threading.Timer(0.5, os.killpg, (server.pid, signal.SIGKILL)).start()
        rows = [answer_row(q, rewritten[q], index, vectors[q], 1.0, settings, kb, server.url)
                for q in list(rewritten)[:4]]
    finally:
        server.stop()
    # Under load the kill can land in a later request than the first, and a request sent while the process is
    # dying can still lose its connection: requests before the kill were answered, each one from it on failed
    # with a connection error, and by the last one nothing listens there.
    errors = [r["error"] for r in rows]
    first = next(i for i, e in enumerate(errors) if e)
    assert errors[:first] == [None] * first
    assert set(errors[first:]) <= {"connection_lost", "unreachable"} and errors[-1] == "unreachable"
    finals = [decide(r, kb, vectors[r["id"]], settings) for r in rows]
    assert {f["status"] for f in finals} <= {"extractive", "refused"}
    assert all(f["reason"].startswith("llm_") for f in finals)


def test_server_does_not_outlive_a_killed_parent():
    import subprocess
    import sys

    code = ("from rag.llm.server import LocalServer; s = LocalServer().start(); print(s.pid, flush=True); "
            "import time; time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)  # no finally, no atexit: only the child's watchdog can help
    parent.wait()
    if not gone_within(child, 10):
        os.killpg(child, signal.SIGKILL)
        raise AssertionError("llm server outlived its parent")
