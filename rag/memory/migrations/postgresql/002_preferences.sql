-- Summary memory across calls (rag.memory.preferences), PostgreSQL. Applied once by rag.memory.sql.
-- A caller's stated preferences, keyed by the caller-id hash (never the id itself); one row per field, the latest wins.
CREATE TABLE preferences (
    caller_hash TEXT NOT NULL,                    -- HMAC-SHA256(key, caller id), hex
    field       TEXT NOT NULL,                    -- a field of memory.preferences.fields (insurance, pet, day)
    value       TEXT NOT NULL,                    -- the caller's own words
    session     TEXT NOT NULL,                    -- the call that stated it
    at          DOUBLE PRECISION NOT NULL,        -- unix seconds when stored; forgotten after memory.preferences.days
    PRIMARY KEY (caller_hash, field)
);
CREATE INDEX preferences_at ON preferences (at);
