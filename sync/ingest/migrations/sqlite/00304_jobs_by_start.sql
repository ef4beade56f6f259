-- +goose Up
-- Job pages are read newest first by first_ts, which only ever falls
-- (ingest keeps the smallest): a keyset cursor over it never passes a job
-- that changes while the pages are read. last_ts rises with every new
-- event, which carried an active job past the cursor of a listing under
-- way, so edge_jobs_recent served a listing that could skip jobs; with no
-- reader left it would only cost every batch an index write.
CREATE INDEX edge_jobs_started ON edge_jobs (edge_id, first_ts DESC, job_id DESC);
DROP INDEX edge_jobs_recent;

-- +goose Down
CREATE INDEX edge_jobs_recent ON edge_jobs (edge_id, last_ts DESC, job_id DESC);
DROP INDEX edge_jobs_started;
