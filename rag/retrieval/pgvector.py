"""A KB served from PostgreSQL + pgvector (issue 16): passages, their embeddings, an HNSW index and a full-text
index in one database (the one that can also hold the conversation memory, `rag.memory`).

`PgVectorStore.load` writes a KB's passages and (n, 384) unit vectors under a key (the KB cache's fingerprint,
`rag.retrieval.kb_cache.fingerprint`, so a changed folder is a new key); `PgVectorStore.dense` gives a
`PgDenseIndex`, which `rag.retrieval.search.PassageIndex` takes in place of the in-process dense index: the
ranking is pgvector's HNSW (`<#>`, negative inner product = cosine on unit vectors). BM25 and the phonetic list
stay in process. SQL is parameterised; the schema is created on first use (``CREATE ... IF NOT EXISTS``).

``kb_passages`` is LIST-partitioned by KB, so every KB has an HNSW graph of its own. One graph over all KBs,
searched with ``WHERE kb = ...``, lost a small KB's neighbours among a large one's (the clinic beside 8,000 rows
crowding its passages kept the in-process top 10 for 6 of its 16 questions, 20,000 looser ones for 11; now 16 and
16, `tests/test_pgvector.py`).
"""
from __future__ import annotations

import hashlib

import numpy as np

from rag.retrieval.chunk import Passage
from rag.retrieval.indexes import Ranking

SCHEMA = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    """CREATE TABLE IF NOT EXISTS kb_passages (
           kb text NOT NULL, pos integer NOT NULL, id text NOT NULL, doc text NOT NULL, body text NOT NULL,
           embedding vector(384) NOT NULL, PRIMARY KEY (kb, pos)) PARTITION BY LIST (kb)""",
    "CREATE INDEX IF NOT EXISTS kb_passages_hnsw ON kb_passages USING hnsw (embedding vector_ip_ops)",
    "CREATE INDEX IF NOT EXISTS kb_passages_fts ON kb_passages USING gin (to_tsvector('english', body))",
)


def partition(kb: str) -> str:
    """The name of KB ``kb``'s partition of ``kb_passages``: ``kb_passages_`` + 16 hex digits of its sha256."""
    return "kb_passages_" + hashlib.sha256(kb.encode("utf-8")).hexdigest()[:16]


def _literal(vector: np.ndarray) -> str:
    """pgvector's text form of a vector: ``[v1,v2,...]`` (float32 values, repr-exact)."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(vector, dtype=np.float32)) + "]"


class PgVectorStore:
    """KBs in one PostgreSQL database (pgvector >= 0.8). url: a libpq URL (``postgresql://...``); raises
    `rag.memory.MemoryUnavailable`-style `ConnectionError` naming the host (never the password) when unreachable,
    LookupError (with the fix) when the database holds ``kb_passages`` in the old unpartitioned layout."""

    def __init__(self, url: str, timeout_s: float = 5.0):
        import psycopg

        from rag.memory.store import refused, where

        try:
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout_s)))
        except psycopg.Error as e:
            raise ConnectionError(refused(url, e)) from None
        kind = self.conn.execute("SELECT relkind FROM pg_class WHERE relname = 'kb_passages' AND "
                                 "relnamespace = current_schema()::regnamespace").fetchone()
        if kind and kind[0] != "p":
            self.conn.close()
            raise LookupError(f"postgresql at {where(url)}: kb_passages has the old one-graph layout; "
                               "run DROP TABLE kb_passages; there, then `rag index` each KB again")
        for statement in SCHEMA:
            self.conn.execute(statement)

    def load(self, kb: str, passages: list[Passage], vectors: np.ndarray) -> int:
        """Replace KB ``kb``'s rows with ``passages`` and their (n, 384) unit ``vectors``, in one transaction;
        returns n. Raises ValueError when the counts differ."""
        if len(passages) != len(vectors):
            raise ValueError(f"{len(passages)} passages but {len(vectors)} vectors")
        from psycopg import sql

        with self.conn.transaction():
            part = sql.Identifier(partition(kb))
            self.conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} PARTITION OF kb_passages FOR VALUES IN ({})")
                              .format(part, sql.Literal(kb)))
            self.conn.execute(sql.SQL("TRUNCATE {}").format(part))
            with self.conn.cursor() as cur:
                cur.executemany("INSERT INTO kb_passages (kb, pos, id, doc, body, embedding) "
                                "VALUES (%s, %s, %s, %s, %s, %s::vector)",
                                [(kb, i, p.id, p.doc, p.text, _literal(v))
                                 for i, (p, v) in enumerate(zip(passages, vectors))])
        return len(passages)

    def count(self, kb: str) -> int:
        """Passages stored under ``kb`` (0: not loaded)."""
        return self.conn.execute("SELECT count(*) FROM kb_passages WHERE kb = %s", (kb,)).fetchone()[0]

    def hnsw_bytes(self, kb: str) -> int:
        """On-disk size of KB ``kb``'s HNSW graph (its partition's pgvector index; ``pg_relation_size``), bytes;
        0 when the KB was never loaded."""
        row = self.conn.execute(
            "SELECT coalesce(sum(pg_relation_size(c.oid)), 0) FROM pg_class t JOIN pg_index i ON i.indrelid = t.oid "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
            "WHERE t.relname = %s AND a.amname = 'hnsw'", (partition(kb),)).fetchone()
        return int(row[0])

    def dense(self, kb: str, ef_search: int = 64) -> "PgDenseIndex":
        """The dense index of KB ``kb``; LookupError when it was never loaded (run ``rag index`` first)."""
        n = self.count(kb)
        if not n:
            raise LookupError(f"KB {kb[:12]} is not in the store: load it with `rag index --kb FOLDER --store URL`")
        return PgDenseIndex(self.conn, kb, n, ef_search)

    def close(self) -> None:
        self.conn.close()


class PgDenseIndex:
    """`rag.retrieval.indexes.DenseIndex`'s query interface over pgvector's HNSW index: scores are cosines
    (float32, from ``-(embedding <#> query)``); a ranking holds at most ``ef_search`` passages (as HNSWIndex)."""

    def __init__(self, conn, kb: str, n: int, ef_search: int = 64):
        self.conn, self.kb, self.n, self.ef_search = conn, kb, n, int(ef_search)
        conn.execute(f"SET hnsw.ef_search = {self.ef_search}")  # an int, not user text

    def top_k(self, query_vector: np.ndarray, k: int | None = None) -> Ranking:
        """The ``k`` (None: ef_search) most similar passages as ``(position, cosine)``, best first."""
        k = min(k or self.ef_search, self.ef_search, self.n)
        q = _literal(query_vector)
        rows = self.conn.execute("SELECT pos, -(embedding <#> %s::vector) AS cos FROM kb_passages WHERE kb = %s "
                                 "ORDER BY embedding <#> %s::vector, pos LIMIT %s", (q, self.kb, q, k)).fetchall()
        return [(int(pos), float(cos)) for pos, cos in rows]

    def best(self, query_vector: np.ndarray) -> float:
        """The highest cosine of any passage (as the HNSW search finds it)."""
        return self.top_k(query_vector, 1)[0][1]
