"""The Redis backend (redis-py): a call's turns in one list per session, expiring with the session."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, replace

from rag.memory.store import CallerHasher, MemoryUnavailable, Turn, where

PREFIX = "rag:memory:"  # keys: PREFIX + "turns:" + session (list of JSON turns), PREFIX + "caller:" + session


class RedisStore:
    """Turns in Redis: ``rag:memory:turns:<session>``, a list of JSON objects (the `Turn` fields), and
    ``rag:memory:caller:<session>``, the caller hash; both get ``PEXPIRE ttl_s`` on every append, so the server
    deletes a session ``ttl_s`` seconds after its latest turn. ``timeout_s``: seconds to connect and per command;
    no retries (a turn must not wait on a dead server). Raises MemoryUnavailable naming the host (never the
    password) when the server cannot be reached, then or later; see `rag.memory.Store`."""

    name = "redis"

    def __init__(self, url: str, ttl_s: float, hasher: CallerHasher, timeout_s: float = 2.0):
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.ttl_s = float(ttl_s)
        self._hash = hasher
        self._where = where(url)
        self._gone = (redis.ConnectionError, redis.TimeoutError)
        self._r = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                       retry=Retry(NoBackoff(), 0), decode_responses=True)
        self._call(self._r.ping)

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except self._gone as e:
            raise MemoryUnavailable(f"redis at {self._where} unreachable ({type(e).__name__})") from None

    def append(self, turn: Turn, caller: str | None = None) -> None:
        turn = turn if turn.at else replace(turn, at=time.time())
        key, ms = PREFIX + "turns:" + turn.session, max(1, round(self.ttl_s * 1000))
        p = self._r.pipeline(transaction=True)
        p.rpush(key, json.dumps(asdict(turn), ensure_ascii=False))
        p.pexpire(key, ms)
        if caller is not None:
            p.set(PREFIX + "caller:" + turn.session, self._hash(caller), px=ms)
        else:
            p.pexpire(PREFIX + "caller:" + turn.session, ms)
        self._call(p.execute)

    def turns(self, session: str, limit: int | None = None) -> list[Turn]:
        if limit is not None and limit <= 0:
            return []
        rows = self._call(self._r.lrange, PREFIX + "turns:" + session, -limit if limit else 0, -1)
        return [Turn(**json.loads(r)) for r in rows]

    def forget(self, session: str) -> int:
        key = PREFIX + "turns:" + session
        p = self._r.pipeline(transaction=True)
        p.llen(key)
        p.delete(key, PREFIX + "caller:" + session)
        return self._call(p.execute)[0]

    def purge_expired(self, now: float | None = None) -> int:
        """0: the server deletes expired keys itself (``now`` is ignored)."""
        return 0

    def close(self) -> None:
        self._r.close()
