-- +goose Up
-- A scheduled day whose message was refused for good (INVALID_MESSAGE,
-- MESSAGE_TOO_LARGE) keeps its mark with the refusal instead of a job
-- (job_id ''): the scheduler does not refuse, and alert on, the same day on
-- every tick, and the operator sees why the day has no job.
ALTER TABLE pipeline_schedule_runs ADD COLUMN error_code TEXT;
ALTER TABLE pipeline_schedule_runs ADD COLUMN error_message TEXT;

-- +goose Down
ALTER TABLE pipeline_schedule_runs DROP COLUMN error_message;
ALTER TABLE pipeline_schedule_runs DROP COLUMN error_code;
