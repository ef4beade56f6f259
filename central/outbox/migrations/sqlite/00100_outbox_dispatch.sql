-- +goose Up
-- redrive restarts an event's age budget from here
ALTER TABLE job_outbox_events ADD COLUMN redriven_at INTEGER;
-- redrive by time and the dead-letter gauge
CREATE INDEX job_outbox_events_dead ON job_outbox_events (dead_lettered_at) WHERE status = 'dead_letter';

-- +goose Down
DROP INDEX job_outbox_events_dead;
ALTER TABLE job_outbox_events DROP COLUMN redriven_at;
