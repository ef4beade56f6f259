-- +goose Up
-- SQLite has one writer at a time, so seq order is commit order and the
-- fleet tail needs no transaction-id column (see the Postgres migration).

-- Nonces of verified sync requests, shared by every process on the file.
CREATE TABLE edge_sync_nonces (
    nonce       TEXT PRIMARY KEY,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX edge_sync_nonces_expiry ON edge_sync_nonces (expires_at);

CREATE INDEX edge_gaps_received ON edge_gaps (received_at);
CREATE INDEX edge_jobs_activity ON edge_jobs (updated_at);

-- The entry (ms, seq) of the event that set edge_jobs.status, so an event
-- arriving late (a resent older batch) never overrides a newer status;
-- -1 while only non-status events (deltas) or gaps have been seen.
ALTER TABLE edge_jobs ADD COLUMN status_entry_ms BIGINT NOT NULL DEFAULT -1;
ALTER TABLE edge_jobs ADD COLUMN status_entry_seq BIGINT NOT NULL DEFAULT -1;
-- sent_at (Unix ms) of the heartbeat stored in edges.last_status: an older
-- heartbeat delivered late does not replace a newer one.
ALTER TABLE edges ADD COLUMN last_status_at BIGINT;

-- +goose Down
ALTER TABLE edges DROP COLUMN last_status_at;
ALTER TABLE edge_jobs DROP COLUMN status_entry_seq;
ALTER TABLE edge_jobs DROP COLUMN status_entry_ms;
DROP INDEX edge_jobs_activity;
DROP INDEX edge_gaps_received;
DROP TABLE edge_sync_nonces;
