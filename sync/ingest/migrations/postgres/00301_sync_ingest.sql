-- +goose Up
-- The fleet tail (GET /v1/edges/events) reads events in commit-safe order:
-- xid is the inserting transaction's id, and a row is only streamed once
-- every transaction with a smaller xid has ended (pg_snapshot_xmin), so
-- identity values that commit out of order are never skipped.
ALTER TABLE edge_events ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX edge_events_tail ON edge_events (xid, seq);

-- Nonces of verified sync requests, shared by every central pod so a
-- request replayed to another pod is refused too; pruned once expired.
CREATE TABLE edge_sync_nonces (
    nonce       TEXT PRIMARY KEY,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX edge_sync_nonces_expiry ON edge_sync_nonces (expires_at);

-- Retention prunes gaps by arrival and job summaries by last activity.
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
DROP INDEX edge_events_tail;
ALTER TABLE edge_events DROP COLUMN xid;
