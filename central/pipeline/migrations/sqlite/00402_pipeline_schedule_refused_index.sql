-- +goose Up
-- The refused scheduled days (job_id '') that the API lists, newest day
-- first, without reading the marks of every day that was scheduled.
CREATE INDEX pipeline_schedule_runs_refused ON pipeline_schedule_runs (asof, job_type, symbol) WHERE job_id = '';

-- +goose Down
DROP INDEX pipeline_schedule_runs_refused;
