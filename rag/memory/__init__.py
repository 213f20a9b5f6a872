"""Conversation memory (issue 13): the turns of a call behind one small interface, three backends chosen by URL.

- `Turn`: one stored turn (what was heard as text, the resolved query, what was said, status, source; never audio);
- `Store`: the interface of `SQLiteStore` (embedded default), `RedisStore` (short-term, TTL) and `PostgresStore`
  (long-term archive, migrations in ``rag/memory/migrations``); `open_store` picks one from a URL;
- `Memory`: what the chain uses; falls back to the embedded store when a server goes away, never raises in a turn;
  `open_memory` builds it from the params ``memory:`` values and ``$RAG_MEMORY_URL`` / ``$RAG_MEMORY_ARCHIVE_URL``;
- `CallerHasher`: a caller id is stored only as HMAC-SHA256 under ``$RAG_CALLER_KEY`` or ``<cache_dir>/caller.key``.
"""
from rag.memory.memory import Memory, open_memory
from rag.memory.store import CallerHasher, MemoryUnavailable, Store, Turn, open_store, where

__all__ = ["CallerHasher", "Memory", "MemoryUnavailable", "Store", "Turn", "open_memory", "open_store", "where"]
