-- +goose Up
-- The delivery attempt ceiling is the dispatcher's setting
-- (EUTERPE_OUTBOX_MAX_ATTEMPTS) alone: a per-row copy that nothing read
-- only disagreed with it (10 stored, 200 in force).
ALTER TABLE job_outbox_events DROP COLUMN max_attempts;

-- +goose Down
ALTER TABLE job_outbox_events ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 10;
