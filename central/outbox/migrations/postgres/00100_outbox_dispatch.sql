-- +goose Up
-- redrive restarts an event's age budget from here
ALTER TABLE job_outbox_events ADD COLUMN redriven_at BIGINT;
-- redrive by time and the dead-letter gauge
CREATE INDEX job_outbox_events_dead ON job_outbox_events (dead_lettered_at) WHERE status = 'dead_letter';
-- wake dispatchers when events commit (one notification per statement,
-- delivered at commit; identical notifications in a transaction fold)
-- +goose StatementBegin
CREATE FUNCTION euterpe_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('euterpe_outbox', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER job_outbox_events_notify AFTER INSERT ON job_outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION euterpe_outbox_notify();

-- +goose Down
DROP TRIGGER job_outbox_events_notify ON job_outbox_events;
DROP FUNCTION euterpe_outbox_notify();
DROP INDEX job_outbox_events_dead;
ALTER TABLE job_outbox_events DROP COLUMN redriven_at;
