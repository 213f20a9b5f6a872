"""The two SQL backends: SQLite (standard library, the embedded default) and PostgreSQL (psycopg 3).

Both hold the same tables, made by the migration files in ``rag/memory/migrations/<backend>/NNN_*.sql``
(applied once each, in name order, recorded in ``schema_migrations``): ``sessions(id, caller_hash, started_at,
last_at)``, ``turns(id, session, n, heard, query, say, status, source, reason, at)`` and ``preferences(caller_hash,
field, value, session, at)`` (`rag.memory.preferences`); times in unix seconds.
A session expires ``ttl_s`` seconds after its latest turn (``last_at``). All SQL is parameterised; the queries are
written once, with ``?`` placeholders (psycopg gets ``%s``).
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Mapping

from rag.memory.store import CallerHasher, MemoryUnavailable, Turn, refused, where

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_FIELDS = "session, n, heard, query, say, status, source, reason, at"


def statements(sql: str) -> list[str]:
    """The statements of a migration file, split where SQLite's parser sees a complete one (no ``$$`` bodies)."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip() and not all(ln.strip().startswith("--") for ln in buf.strip().splitlines()):
        out.append(buf.strip())
    return out


class _SQLStore:
    """What SQLite and PostgreSQL share: the queries, the migrations, one lock around each transaction."""

    name: str
    _gone: tuple[type[BaseException], ...] = ()  # the driver's "connection lost" errors

    def __init__(self, ttl_s: float, hasher: CallerHasher, place: str):
        self.ttl_s = float(ttl_s)
        self._hash = hasher
        self._place = place
        self._lock = threading.Lock()

    def _q(self, sql: str) -> str:
        return sql.replace("?", self._place)

    @contextmanager
    def _tx(self):  # a cursor inside one transaction
        raise NotImplementedError

    def _lock_schema(self, cur) -> None:
        """Serialise concurrent migrations (SQLite: BEGIN IMMEDIATE already does)."""

    def _run(self, fn: Callable):
        with self._lock:
            try:
                with self._tx() as cur:
                    return fn(cur)
            except self._gone as e:
                raise MemoryUnavailable(f"{self.name} at {self._where} unreachable ({type(e).__name__})") from None

    def _migrate(self) -> None:
        def run(cur):
            self._lock_schema(cur)
            cur.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                        "(version TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
            done = {r[0] for r in cur.execute("SELECT version FROM schema_migrations").fetchall()}
            for f in sorted((MIGRATIONS / self.name).glob("*.sql")):
                if f.stem not in done:
                    for s in statements(f.read_text(encoding="utf-8")):
                        cur.execute(s)
                    cur.execute(self._q("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)"),
                                (f.stem, time.time()))
        self._run(run)

    def append(self, turn: Turn, caller: str | None = None) -> None:
        at = turn.at or time.time()
        digest = self._hash(caller) if caller is not None else None

        def run(cur):
            # an expired session id that comes back starts afresh, as an expired Redis key would
            cutoff = time.time() - self.ttl_s
            cur.execute(self._q("DELETE FROM turns WHERE session IN "
                                "(SELECT id FROM sessions WHERE id = ? AND last_at <= ?)"), (turn.session, cutoff))
            cur.execute(self._q("DELETE FROM sessions WHERE id = ? AND last_at <= ?"), (turn.session, cutoff))
            cur.execute(self._q(
                "INSERT INTO sessions (id, caller_hash, started_at, last_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET last_at = excluded.last_at, "
                "caller_hash = COALESCE(excluded.caller_hash, sessions.caller_hash)"),
                (turn.session, digest, at, at))
            cur.execute(self._q(f"INSERT INTO turns ({_FIELDS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                        (turn.session, turn.n, turn.heard, turn.query, turn.say, turn.status, turn.source,
                         turn.reason, at))
        self._run(run)

    def turns(self, session: str, limit: int | None = None) -> list[Turn]:
        if limit is not None and limit <= 0:
            return []
        sql = ("SELECT " + ", ".join(f"t.{f}" for f in _FIELDS.split(", ")) + " FROM turns t "
               "JOIN sessions s ON s.id = t.session WHERE t.session = ? AND s.last_at > ? ORDER BY t.id DESC")
        args: tuple = (session, time.time() - self.ttl_s)
        if limit is not None:
            sql, args = sql + " LIMIT ?", args + (int(limit),)
        rows = self._run(lambda cur: cur.execute(self._q(sql), args).fetchall())
        return [Turn(*r) for r in reversed(rows)]

    def save_preferences(self, caller: str, prefs: Mapping[str, str], session: str, at: float | None = None) -> None:
        """Store ``prefs`` ({field: value}) for ``caller`` (kept as its `CallerHasher` digest), stated in ``session``
        at ``at`` (unix seconds, default now); a field stored before is replaced."""
        at, digest = at or time.time(), self._hash(caller)

        def run(cur):
            for field, value in prefs.items():
                cur.execute(self._q("INSERT INTO preferences (caller_hash, field, value, session, at) VALUES "
                                    "(?, ?, ?, ?, ?) ON CONFLICT (caller_hash, field) DO UPDATE SET "
                                    "value = excluded.value, session = excluded.session, at = excluded.at"),
                            (digest, field, value, session, at))
        self._run(run)

    def preferences(self, caller: str, max_age_s: float, now: float | None = None) -> dict[str, str]:
        """``{field: value}`` stored for ``caller`` within ``max_age_s`` seconds of ``now`` (default the current
        time); older rows of every caller are deleted first (retention)."""
        cutoff, digest = (time.time() if now is None else now) - max_age_s, self._hash(caller)

        def run(cur):
            cur.execute(self._q("DELETE FROM preferences WHERE at <= ?"), (cutoff,))
            return cur.execute(self._q("SELECT field, value FROM preferences WHERE caller_hash = ? ORDER BY field"),
                               (digest,)).fetchall()
        return dict(self._run(run))

    def forget(self, session: str) -> int:
        def run(cur):
            n = cur.execute(self._q("DELETE FROM turns WHERE session = ?"), (session,)).rowcount
            cur.execute(self._q("DELETE FROM sessions WHERE id = ?"), (session,))
            cur.execute(self._q("DELETE FROM preferences WHERE session = ?"), (session,))
            return n
        return self._run(run)

    def purge_expired(self, now: float | None = None) -> int:
        cutoff = (time.time() if now is None else now) - self.ttl_s

        def run(cur):
            n = cur.execute(self._q("DELETE FROM turns WHERE session IN (SELECT id FROM sessions WHERE last_at <= ?)"),
                            (cutoff,)).rowcount
            cur.execute(self._q("DELETE FROM sessions WHERE last_at <= ?"), (cutoff,))
            return n
        return self._run(run)


class SQLiteStore(_SQLStore):
    """Turns in a SQLite file (or ``":memory:"``, this process only), standard library only; see `rag.memory.Store`.
    ``path``'s folder is created. Raises sqlite3.Error / OSError when the file cannot be opened or migrated."""

    name = "sqlite"

    def __init__(self, path: str | Path, ttl_s: float, hasher: CallerHasher):
        super().__init__(ttl_s, hasher, "?")
        self._where = str(path)
        if str(path) != ":memory:":  # the file holds transcripts: owner-only from the start
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=10.0)
        self._migrate()

    @contextmanager
    def _tx(self):
        cur = self._conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


class PostgresStore(_SQLStore):
    """Turns in PostgreSQL via psycopg 3 (one connection, one transaction per call); see `rag.memory.Store`.
    ``timeout_s``: seconds to connect. Raises MemoryUnavailable naming the host (never the password) when the
    server cannot be reached, then or later."""

    name = "postgresql"

    def __init__(self, url: str, ttl_s: float, hasher: CallerHasher, timeout_s: float = 2.0):
        import psycopg

        super().__init__(ttl_s, hasher, "%s")
        self._where = where(url)
        self._gone = (psycopg.OperationalError, psycopg.InterfaceError)
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=max(1, round(timeout_s)))
        except psycopg.Error as e:
            raise MemoryUnavailable(refused(url, e)) from None
        self._migrate()

    @contextmanager
    def _tx(self):
        with self._conn.transaction(), self._conn.cursor() as cur:
            yield cur

    def _lock_schema(self, cur) -> None:
        cur.execute(self._q("SELECT pg_advisory_xact_lock(?)"), (0x7261676D656D,))  # "ragmem"

    def close(self) -> None:
        self._conn.close()
