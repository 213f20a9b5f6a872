-- Conversation memory (rag.memory), SQLite: the same tables as migrations/postgresql/001_memory.sql.
-- Nothing identifying beyond the session id: the caller id is an HMAC-SHA256 hex digest, no audio is ever stored.
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,                 -- the call's session id
    caller_hash TEXT,                             -- HMAC-SHA256(key, caller id), hex; NULL when no caller id
    started_at  REAL NOT NULL,                    -- unix seconds of the first turn
    last_at     REAL NOT NULL                     -- unix seconds of the latest turn; expiry = last_at + ttl_s
);
CREATE INDEX sessions_last_at ON sessions (last_at);
CREATE TABLE turns (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,    -- order recorded
    session TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    n       INTEGER NOT NULL,                     -- 1-based turn number in the session
    heard   TEXT NOT NULL,                        -- the transcript as heard (ASR text)
    query   TEXT NOT NULL,                        -- the resolved search query
    say     TEXT NOT NULL,                        -- what was said
    status  TEXT NOT NULL,                        -- llm | extractive | refused
    source  TEXT NOT NULL,                        -- cited document id or "none"
    reason  TEXT NOT NULL,                        -- verifier / fallback reason
    at      REAL NOT NULL                         -- unix seconds when recorded
);
CREATE INDEX turns_session ON turns (session, id);
