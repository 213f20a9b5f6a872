"""Conversation memory (rag.memory): one suite run on the three backends against real servers (rag/memory/servers.py):
SQLite (file), Redis (valkey-server) and PostgreSQL, each on a Unix socket in a temp folder."""
import sqlite3
import threading
import time
from pathlib import Path

import psycopg
import pytest
import redis

from rag.llm.server import free_port
from rag.memory import CallerHasher, Memory, MemoryUnavailable, Turn, open_memory, open_store
from rag.memory.bench import turn_overhead_ms

BACKENDS = ["sqlite", "redis", "postgresql"]
CALLER = "+1 555 010 4477"


class Backend:
    """A store URL and direct (driver-level) access to what the store wrote, to check it without the store."""

    def __init__(self, name: str, url: str, tmp_path: Path):
        self.name, self.url, self.cache = name, url, tmp_path / "cache"

    def open(self, ttl_s: float = 60.0):
        return open_store(self.url, ttl_s, self.cache)

    def raw(self) -> str:
        """Everything the backend holds, as one text (all keys and values; all rows of all tables)."""
        if self.name == "redis":
            r = redis.Redis.from_url(self.url, decode_responses=True)
            out = []
            for k in r.keys("*"):
                out.append(k)
                out += r.lrange(k, 0, -1) if r.type(k) == "list" else [r.get(k)]
            return "\n".join(out)
        if self.name == "sqlite":
            return Path(self.url[len("sqlite:///"):]).read_bytes().decode("utf-8", "replace")
        with psycopg.connect(self.url) as c:
            return "\n".join(str(row) for t in ("sessions", "turns") for row in c.execute(f"SELECT * FROM {t}"))

    def count(self, session: str) -> int:
        """Rows (SQL: turns + sessions) or keys (Redis: turns list + caller hash) of ``session`` left."""
        if self.name == "redis":
            r = redis.Redis.from_url(self.url)
            return r.exists(f"rag:memory:turns:{session}") + r.exists(f"rag:memory:caller:{session}")
        q = ("SELECT (SELECT count(*) FROM turns WHERE session = ?) + (SELECT count(*) FROM sessions WHERE id = ?)")
        if self.name == "sqlite":
            with sqlite3.connect(self.url[len("sqlite:///"):]) as c:
                return c.execute(q, (session, session)).fetchone()[0]
        with psycopg.connect(self.url) as c:
            return c.execute(q.replace("?", "%s"), (session, session)).fetchone()[0]


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    name = request.param
    if name == "sqlite":
        yield Backend(name, f"sqlite:///{tmp_path}/memory.sqlite3", tmp_path)
        return
    server = request.getfixturevalue("redis_server" if name == "redis" else "postgres_server")
    yield Backend(name, server.url, tmp_path)
    if name == "redis":  # the server is shared by the session: leave it empty
        redis.Redis.from_url(server.url).flushdb()
    else:
        with psycopg.connect(server.url) as c:
            c.execute("TRUNCATE turns, sessions, preferences")


def turn(session: str, n: int, at: float = 0.0) -> Turn:
    return Turn(session, n, f"heard {n}", f"query {n}", f"said {n}", "extractive", f"kb-doc{n}", "", at)


def test_append_then_turns_oldest_first_and_limit(backend):
    store = backend.open()
    assert store.name == backend.name
    before = time.time()
    for n in range(1, 6):
        store.append(turn("call-a", n))
    got = store.turns("call-a")
    assert [t.n for t in got] == [1, 2, 3, 4, 5]
    assert got[2] == Turn("call-a", 3, "heard 3", "query 3", "said 3", "extractive", "kb-doc3", "", got[2].at)
    assert before <= got[0].at <= got[-1].at <= time.time()  # at=0 -> the time of append
    assert [t.n for t in store.turns("call-a", limit=2)] == [4, 5]
    assert store.turns("call-a", limit=0) == [] and store.turns("nobody") == []
    store.append(Turn("call-a", 6, "é 😀", "q", "s", "refused", "none", "no answer", at=1234.5 + time.time()))
    assert store.turns("call-a", 1)[0].heard == "é 😀" and store.turns("call-a", 1)[0].reason == "no answer"
    store.close()


def test_concurrent_sessions_never_see_each_other(backend):
    store = backend.open()
    errors = []

    def call(session):
        try:
            for n in range(1, 16):
                store.append(turn(session, n))
                seen = store.turns(session)
                assert {t.session for t in seen} == {session} and [t.n for t in seen] == list(range(1, n + 1))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(f"call-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i in range(4):
        assert [(t.session, t.n) for t in store.turns(f"call-{i}")] == [(f"call-{i}", n) for n in range(1, 16)]
    other = backend.open()  # a second connection (another worker) sees the same, per session
    assert [t.n for t in other.turns("call-2", 3)] == [13, 14, 15]
    store.close()
    other.close()


def test_turns_expire_ttl_after_the_last_turn(backend):
    store = backend.open(ttl_s=0.8)
    store.append(turn("call-a", 1))
    time.sleep(0.5)
    store.append(turn("call-a", 2))  # refreshes the session's expiry
    time.sleep(0.5)
    assert [t.n for t in store.turns("call-a")] == [1, 2]
    time.sleep(0.5)
    assert store.turns("call-a") == []
    if backend.name == "redis":  # real expiry: the server deleted the keys
        assert backend.count("call-a") == 0
    store.append(turn("call-a", 3))  # the same id after expiry starts afresh
    assert [t.n for t in store.turns("call-a")] == [3]
    store.close()


def test_forget_deletes_everything_of_the_session(backend):
    store = backend.open()
    for n in range(1, 4):
        store.append(turn("call-a", n), caller=CALLER)
        store.append(turn("call-b", n), caller="+1 555 010 0000")
    assert backend.count("call-a") == (2 if backend.name == "redis" else 4)
    assert store.forget("call-a") == 3
    assert backend.count("call-a") == 0 and store.turns("call-a") == []
    assert [t.n for t in store.turns("call-b")] == [1, 2, 3]
    assert store.forget("call-a") == 0
    store.close()


def test_purge_expired_deletes_the_rows(backend):
    store = backend.open(ttl_s=60.0)
    store.append(turn("old", 1), caller=CALLER)
    store.append(turn("old", 2))
    now = time.time()
    if backend.name == "redis":  # the server expires keys itself (real expiry: the TTL test above)
        assert store.purge_expired(now + 3600) == 0
        assert 0 < redis.Redis.from_url(backend.url).pttl("rag:memory:turns:old") <= 60_000
        assert 0 < redis.Redis.from_url(backend.url).pttl("rag:memory:caller:old") <= 60_000
        return
    assert store.purge_expired(now + 30) == 0 and backend.count("old") == 3
    store.append(turn("fresh", 1, at=now + 40))  # latest turn 40 s later: alive at now + 61
    assert store.purge_expired(now + 61) == 2
    assert backend.count("old") == 0 and backend.count("fresh") == 2
    assert [t.session for t in store.turns("fresh")] == ["fresh"]
    store.close()


def test_caller_id_is_stored_only_as_a_keyed_hash(backend, monkeypatch):
    monkeypatch.setenv("RAG_CALLER_KEY", "test-key")
    store = backend.open()
    store.append(turn("call-a", 1), caller=CALLER)
    raw = backend.raw()
    digest = CallerHasher()(CALLER)
    assert len(digest) == 64 and digest in raw
    for clear in (CALLER, CALLER.replace(" ", ""), "5550104477", "4477"):
        assert clear not in raw
    store.close()


def test_caller_key_file_is_private_and_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("RAG_CALLER_KEY", raising=False)
    first = CallerHasher(tmp_path)(CALLER)
    key = tmp_path / "caller.key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    assert CallerHasher(tmp_path)(CALLER) == first  # the same key next time
    assert CallerHasher(tmp_path / "other")(CALLER) != first
    assert CallerHasher(tmp_path, env={"RAG_CALLER_KEY": "k"})(CALLER) != first


MIGRATED = ["001_memory", "002_preferences"]


def test_a_server_that_refuses_says_why(postgres_server, tmp_path):
    # a bad-input pass (session 41): a database that does not exist read "unreachable (OperationalError)"
    url = postgres_server.url.replace("@/postgres?", "@/nosuchdb?")
    with pytest.raises(MemoryUnavailable) as e:
        open_store(url, 60, tmp_path)
    host = url.split("host=")[1]
    assert str(e.value) == f'postgresql at {host} refused the connection: database "nosuchdb" does not exist'


def test_migrations_are_applied_once(postgres_server, tmp_path):
    for _ in range(2):
        open_store(postgres_server.url, 60, tmp_path).close()
    with psycopg.connect(postgres_server.url) as c:
        assert sorted(r[0] for r in c.execute("SELECT version FROM schema_migrations")) == MIGRATED
    sqlite_url = f"sqlite:///{tmp_path}/m.sqlite3"
    for _ in range(2):
        open_store(sqlite_url, 60, tmp_path).close()
    with sqlite3.connect(tmp_path / "m.sqlite3") as c:
        assert sorted(r[0] for r in c.execute("SELECT version FROM schema_migrations")) == MIGRATED
    assert (tmp_path / "m.sqlite3").stat().st_mode & 0o777 == 0o600


def test_a_store_made_before_preferences_gets_them_on_open(tmp_path):
    """A memory.sqlite3 written by the previous version (only 001 applied) gains the preferences table, turns kept."""
    from rag.memory.sql import MIGRATIONS, statements

    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
        for s in statements((MIGRATIONS / "sqlite" / "001_memory.sql").read_text()):
            c.execute(s)
        c.execute("INSERT INTO schema_migrations VALUES ('001_memory', 0)")
        c.execute("INSERT INTO sessions VALUES ('call-a', NULL, 1e10, 1e10)")
        c.execute("INSERT INTO turns (session, n, heard, query, say, status, source, reason, at) "
                  "VALUES ('call-a', 1, 'h', 'q', 's', 'extractive', 'kb-x', '', 1e10)")
    store = open_store(f"sqlite:///{path}", 60, tmp_path)
    store.save_preferences(CALLER, {"pet": "cat"}, "call-a")
    assert store.preferences(CALLER, 60) == {"pet": "cat"} and [t.n for t in store.turns("call-a")] == [1]
    store.close()


def test_default_url_is_sqlite_in_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "env-cache"))
    store = open_store("", 60)
    store.append(turn("call-a", 1), caller=CALLER)
    assert store.name == "sqlite" and (tmp_path / "env-cache" / "memory.sqlite3").is_file()
    assert (tmp_path / "env-cache" / "caller.key").is_file()
    mem = open_store("sqlite://", 60, tmp_path)
    mem.append(turn("call-a", 1))
    assert [t.n for t in mem.turns("call-a")] == [1]


def test_bad_scheme_is_a_value_error_without_the_password(tmp_path):
    for url in ("mysql://ann:s3cr3t@db.example:3306/x", "http://ann:s3cr3t@h/", "sqlite://ann:s3cr3t@h/x"):
        with pytest.raises(ValueError) as e:
            open_store(url, 60, tmp_path)
        assert "s3cr3t" not in str(e.value) and url.split(":")[0] in str(e.value)
    with pytest.raises(ValueError, match="'mysql'") as e:
        open_memory("", "mysql://ann:s3cr3t@db/x", 30, 30, tmp_path, env={})
    assert "s3cr3t" not in str(e.value)


def test_server_down_at_start_falls_back_to_sqlite_and_warns(tmp_path):
    port = free_port()
    with pytest.raises(MemoryUnavailable, match=f"redis at 127.0.0.1:{port} unreachable") as e:
        open_store(f"redis://:s3cr3t@127.0.0.1:{port}/0", 60, tmp_path)
    assert "s3cr3t" not in str(e.value)
    with pytest.raises(MemoryUnavailable, match=f"postgresql at {tmp_path}") as e:
        open_store(f"postgresql://ann:s3cr3t@/x?host={tmp_path}", 60, tmp_path)
    assert "s3cr3t" not in str(e.value)
    warned = []
    memory = open_memory(f"redis://:s3cr3t@127.0.0.1:{port}/0", f"postgresql://ann:s3cr3t@127.0.0.1:{port}/x",
                         30, 30, tmp_path, warned.append, env={})
    assert memory.short.name == "sqlite" and memory.archive is None
    assert warned == [f"redis at 127.0.0.1:{port} unreachable (ConnectionError): switched to sqlite",
                      f"archive postgresql at 127.0.0.1:{port} unreachable (OperationalError): no long-term memory"]
    assert memory.degraded == "; ".join(warned) and "s3cr3t" not in memory.degraded
    memory.record(turn("call-a", 1))
    assert [t.n for t in memory.history("call-a", 8)] == [1]
    assert (tmp_path / "memory.sqlite3").is_file()


def test_open_memory_uses_params_and_env_overrides(params, redis_server, postgres_server, tmp_path):
    p = params["memory"]
    assert set(p) >= {"url", "archive_url", "ttl_min", "retention_days", "max_turns"}
    memory = open_memory(p["url"], p["archive_url"], p["ttl_min"], p["retention_days"], tmp_path, env={})
    assert memory.short.name == "sqlite" and memory.archive is None and memory.degraded is None
    assert memory.short.ttl_s == p["ttl_min"] * 60
    memory.close()
    env = {"RAG_MEMORY_URL": redis_server.url, "RAG_MEMORY_ARCHIVE_URL": postgres_server.url}
    memory = open_memory(p["url"], p["archive_url"], 30, 30, tmp_path, env=env)
    assert (memory.short.name, memory.archive.name) == ("redis", "postgresql") and memory.degraded is None
    assert (memory.short.ttl_s, memory.archive.ttl_s) == (1800.0, 30 * 86400.0)
    memory.record(turn("call-a", 1), caller=CALLER)
    memory.record(turn("call-a", 2))
    assert [t.n for t in memory.history("call-a", 1)] == [2]
    assert [t.n for t in memory.archive.turns("call-a")] == [1, 2]
    assert memory.forget("call-a") == {"redis": 2, "postgresql": 2, "sqlite": 0}
    assert memory.history("call-a", 8) == [] and memory.archive.turns("call-a") == []
    memory.close()


@pytest.mark.parametrize("name", ["redis", "postgresql"])
def test_server_killed_mid_call_continues_on_sqlite(name, tmp_path):
    from rag.memory.servers import start_postgres, start_redis

    server = start_redis() if name == "redis" else start_postgres()  # its own instance: the shared one lives on
    try:
        warned = []
        memory = Memory(open_store(server.url, 60, tmp_path), None,
                        lambda: open_store(f"sqlite:///{tmp_path}/fallback.sqlite3", 60, tmp_path), warned.append)
        memory.record(turn("call-a", 1))
        assert [t.n for t in memory.history("call-a", 8)] == [1] and memory.degraded is None
        server.kill()
        memory.record(turn("call-a", 2))  # no exception into the turn
        assert memory.short.name == "sqlite"
        assert [t.n for t in memory.history("call-a", 8)] == [2]  # turn 1 stayed on the dead server
        assert len(warned) == 1 and warned[0].startswith(f"{name} at ") and "unreachable" in warned[0]
        assert memory.degraded == warned[0] and memory.degraded.endswith(": switched to sqlite")
        with pytest.raises(MemoryUnavailable, match=f"not forgotten everywhere: {name} at .* unreachable"):
            memory.forget("call-a")  # the dead server's copy cannot be deleted: said, not hidden
        assert memory.history("call-a", 8) == []  # ... but the reachable fallback was cleared
    finally:
        server.stop()


def test_killed_archive_and_no_fallback_mean_no_memory(postgres_server, tmp_path):
    from rag.memory.servers import start_redis

    server = start_redis()
    try:
        warned = []
        archive = open_store(postgres_server.url, 86400, tmp_path)
        memory = Memory(open_store(server.url, 60, tmp_path), archive, None, warned.append)
        memory.record(turn("call-b", 1))
        server.kill()
        memory.record(turn("call-b", 2))
        assert memory.history("call-b", 8) == [] and memory.short is None
        assert warned == [f"redis at {server.folder}/redis.sock unreachable (ConnectionError): no memory"]
        assert [t.n for t in archive.turns("call-b")] == [1, 2]  # the archive kept recording
        archive.close()
        memory.record(turn("call-b", 3))  # the archive's connection is gone now too
        assert memory.archive is None and len(warned) == 2 and warned[1].endswith("no long-term memory")
    finally:
        server.stop()


def test_bench_returns_latencies(backend):
    store = backend.open()
    out = turn_overhead_ms(store, turns=20)
    assert set(out) == {"backend", "turns", "p50", "p95"}
    assert out["backend"] == backend.name and out["turns"] == 20 and 0 < out["p50"] <= out["p95"]
    assert backend.raw().count("kb-vaccines") == 0  # the bench session is forgotten
    store.close()


def test_text_that_is_not_utf8_is_stored_and_keeps_the_store(tmp_path):
    # lone surrogates are what Python makes of non-UTF-8 bytes (stdin, argv): before, the store raised
    # UnicodeEncodeError and Memory dropped it for the rest of the call ("sqlite failed: no memory")
    store = open_store("", 60.0, tmp_path)
    memory = Memory(store)
    memory.record(Turn("call-u", 1, "what \udcff time", "what time", "said", "extractive", "kb-hours"), "\udcff")
    memory.record(Turn("call-u", 2, "and on sunday", "q2", "said 2", "extractive", "kb-hours"))
    assert memory.degraded is None and memory.short is store
    assert [(t.n, t.heard) for t in memory.history("call-u", 8)] == [(1, "what \ufffd time"), (2, "and on sunday")]
    (digest,) = sqlite3.connect(tmp_path / "memory.sqlite3").execute(
        "SELECT caller_hash FROM sessions WHERE id = 'call-u'").fetchone()
    assert len(digest) == 64 and digest == CallerHasher(tmp_path)("\udcff")
    store.close()


@pytest.mark.parametrize("content", ["garbage", "foreign_schema"])
def test_an_unusable_embedded_store_means_no_memory_and_is_left_as_it_is(tmp_path, content):
    db = tmp_path / "memory.sqlite3"
    if content == "garbage":
        db.write_bytes(b"\x00not a database\xff" * 4096)
    else:
        with sqlite3.connect(db) as c:
            c.execute("CREATE TABLE turns (a, b)")
            c.execute("INSERT INTO turns VALUES (1, 2)")
    before, told = db.read_bytes(), []
    memory = open_memory("", "", 30, 30, tmp_path, warn=told.append, env={})  # before: sqlite3.DatabaseError raised
    why = ("DatabaseError: file is not a database" if content == "garbage"
           else "OperationalError: table turns already exists")
    assert memory.short is None and told == [memory.degraded]
    assert memory.degraded == f"sqlite at {db} could not be opened ({why}): no memory"
    memory.record(Turn("call-x", 1, "h", "q", "s", "extractive", "kb-hours"))  # never raises
    assert memory.history("call-x", 8) == [] and db.read_bytes() == before
