"""The turn record, the store interface every backend implements, the caller-id hash, and `open_store`, which
picks the backend from a URL."""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import tempfile
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

from rag.retrieval.kb_cache import default_cache_dir


class MemoryUnavailable(RuntimeError):
    """A memory server cannot be reached (at open or during a call). The message names the backend and the host
    (or socket path), never a password."""


@dataclass(frozen=True)
class Turn:
    """One turn of a call, as stored. session: the call's session id; n: 1-based turn number in the session;
    heard: the transcript as heard (ASR text, never audio); query: the resolved search query; say: what was said;
    status: ``llm`` | ``extractive`` | ``refused``; source: the cited document id or ``"none"``; reason: why
    (verifier / fallback reason); at: unix seconds when recorded (0 -> the time of `Store.append`)."""

    session: str
    n: int
    heard: str
    query: str
    say: str
    status: str
    source: str
    reason: str = ""
    at: float = 0.0


class Store(Protocol):
    """A backend holding the turns of sessions. A session expires ``ttl_s`` seconds after its latest turn (the
    store's ``ttl_s``): its turns are no longer read back, and `purge_expired` (or the server, for Redis)
    deletes them. All methods are safe to call from several threads."""

    name: str  # "sqlite" | "redis" | "postgresql"
    ttl_s: float

    def append(self, turn: Turn, caller: str | None = None) -> None:
        """Store ``turn`` (its ``at`` set to now when 0) at the end of its session and refresh the session's
        expiry; ``caller`` (a phone number or any caller id) is stored only as `CallerHasher` digest.
        Raises MemoryUnavailable when the server went away."""

    def turns(self, session: str, limit: int | None = None) -> list[Turn]:
        """The session's unexpired turns in the order recorded (oldest first), only the last ``limit`` when
        given (``limit <= 0`` -> none). Raises MemoryUnavailable when the server went away."""

    def forget(self, session: str) -> int:
        """Delete everything of ``session`` (turns, caller hash, and on SQL stores the preferences it stated); the
        number of turns deleted.
        Raises MemoryUnavailable when the server went away."""

    def purge_expired(self, now: float | None = None) -> int:
        """Delete the turns of sessions expired at ``now`` (unix seconds, default the current time); the number
        of turns deleted (Redis: always 0, the server expires keys itself). Raises MemoryUnavailable when the
        server went away."""

    def close(self) -> None:
        """Release the connection; the store is unusable afterwards. Never raises."""


class CallerHasher:
    """Caller id -> HMAC-SHA256(key, caller id) hex digest (64 characters), the only form a caller id is stored
    in. The key: ``$RAG_CALLER_KEY`` (UTF-8 bytes) when set, else 32 random bytes kept at
    ``<cache_dir>/caller.key`` (mode 0600), created on first use only (atomically: a second process reads the
    first one's key). Raises OSError when the key file can neither be read nor created."""

    def __init__(self, cache_dir: str | Path | None = None, env: dict | None = None):
        self.path = Path(cache_dir or default_cache_dir()) / "caller.key"
        self._env = os.environ if env is None else env
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def key(self) -> bytes:
        """The HMAC key (bytes), read or created on the first call."""
        with self._lock:
            if self._key is None:
                given = self._env.get("RAG_CALLER_KEY")
                self._key = given.encode("utf-8") if given else _key_file(self.path)
            return self._key

    def __call__(self, caller: str) -> str:
        # surrogatepass: a caller id decoded from non-UTF-8 bytes (lone surrogates) hashes instead of raising
        return hmac.new(self.key(), caller.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


SESSION_MAX = 200  # characters of a session id


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate (what Python makes of non-UTF-8 bytes on stdin or in argv) replaced by
    U+FFFD, so that every backend can store it and JSON output stays valid UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


BIDI_CONTROLS = frozenset({"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})  # reorder what is printed


def session_problem(session: str) -> str | None:
    """Why ``session`` cannot be a session id (None when it can): empty or only spaces, longer than
    `SESSION_MAX` characters, or holding a control character, a line break (U+2028 and U+2029 too), a
    bidirectional override or bytes that are not UTF-8."""
    if not session.strip():
        return "--session is empty"
    if len(session) > SESSION_MAX:
        return f"--session is {len(session)} characters long (at most {SESSION_MAX})"
    if any(unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") or unicodedata.bidirectional(c) in BIDI_CONTROLS
           for c in session):
        return f"--session {clean_text(session)!r} holds a control character or bytes that are not UTF-8"
    return None


def _key_file(path: Path) -> bytes:
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".caller.key.")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
            os.link(tmp, path)  # fails when another process created the key first: theirs is kept
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    return path.read_bytes()


def where(url: str) -> str:
    """The host:port, socket path or file of a store URL, for messages: never the user name or password."""
    u = urlsplit(url)
    if u.scheme == "unix":
        return u.path
    if not u.hostname:  # postgresql://user@/db?host=/socket/dir
        return parse_qs(u.query).get("host", ["the local socket"])[0]
    return f"{u.hostname}:{u.port}" if u.port else u.hostname


def refused(url: str, e: Exception) -> str:
    """A message for a PostgreSQL connection that failed: what the server said when it answered and refused ("postgresql
    at /tmp/pg refused the connection: database "calls" does not exist"; a wrong database, user or option), else
    "unreachable" (no server answered). Never the password: libpq's FATAL lines name at most the user."""
    fatal = [line.split("FATAL:", 1)[1].strip() for line in str(e).splitlines() if "FATAL:" in line]
    if fatal:
        return f"postgresql at {where(url)} refused the connection: {fatal[-1]}"
    return f"postgresql at {where(url)} unreachable ({type(e).__name__})"


def open_store(url: str, ttl_s: float, cache_dir: str | Path | None = None, timeout_s: float = 2.0) -> Store:
    """The store a URL names; sessions expire ``ttl_s`` seconds after their latest turn.

    - ``""``: SQLite file ``<cache_dir>/memory.sqlite3`` (``cache_dir`` default: `rag.retrieval.kb_cache.default_cache_dir`);
      ``sqlite://``: SQLite in memory (this process only); ``sqlite:///PATH``: SQLite file PATH (relative to the
      working directory; ``sqlite:////abs/path`` for an absolute one);
    - ``redis://[:PASSWORD@]HOST:PORT/DB``, ``rediss://...`` or ``unix:///PATH/redis.sock[?db=N]``: Redis (a list
      per session, expiring ``ttl_s`` after the latest append);
    - ``postgresql://...`` or ``postgres://...``: PostgreSQL (tables made by ``rag/memory/migrations/postgresql``).

    The caller-id key (`CallerHasher`) lives in ``cache_dir`` too. ``timeout_s``: seconds to connect (Redis and
    PostgreSQL) and per Redis command before the server counts as gone. Raises ValueError naming the scheme for
    any other URL (never the password), MemoryUnavailable naming the host when the server cannot be reached,
    sqlite3.Error / OSError when the SQLite file cannot be opened.
    """
    scheme = urlsplit(url).scheme.lower() if url else "sqlite"
    hasher = CallerHasher(cache_dir)
    if scheme == "sqlite":
        from rag.memory.sql import SQLiteStore

        if not url:
            path = Path(cache_dir or default_cache_dir()) / "memory.sqlite3"
        elif url.rstrip("/") == "sqlite:":
            path = ":memory:"
        elif url.startswith("sqlite:///"):
            path = url[len("sqlite:///"):]
        else:
            raise ValueError(f"memory URL: sqlite URLs are sqlite:// or sqlite:///PATH, got scheme {scheme!r} "
                             "with a host")
        return SQLiteStore(path, ttl_s, hasher)
    if scheme in ("redis", "rediss", "unix"):
        from rag.memory.redis_store import RedisStore

        return RedisStore(url, ttl_s, hasher, timeout_s)
    if scheme in ("postgresql", "postgres"):
        from rag.memory.sql import PostgresStore

        return PostgresStore(url, ttl_s, hasher, timeout_s)
    raise ValueError(f"memory URL: unknown scheme {scheme!r} (use sqlite://, redis://, unix://, postgresql://)")
