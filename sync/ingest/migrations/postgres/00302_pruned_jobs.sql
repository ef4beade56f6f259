-- +goose Up
-- What retention removed, per edge job: the latest entry (ms, seq) of the
-- job's pruned events and gaps. An edge may resend them long after (an
-- answer it never read, a move repeated after a crash, a quarantined batch
-- resent by hand); their ids are gone from edge_events and edge_gaps, so
-- ingest answers entries up to this mark as duplicates instead of storing
-- them again. A mark is kept one retention period after its prune.
CREATE TABLE edge_pruned_jobs (
    edge_id    TEXT NOT NULL,
    job_id     TEXT NOT NULL,
    entry_ms   BIGINT NOT NULL,
    entry_seq  BIGINT NOT NULL,
    pruned_at  BIGINT NOT NULL,
    PRIMARY KEY (edge_id, job_id)
);
CREATE INDEX edge_pruned_jobs_at ON edge_pruned_jobs (pruned_at);

-- +goose Down
DROP TABLE edge_pruned_jobs;
