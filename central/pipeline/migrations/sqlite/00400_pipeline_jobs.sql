-- +goose Up
-- The pipeline queue IS this table: a job row is its queue message, claimed
-- under a lease (visibility timeout) once visible_at has passed. Times are
-- Unix microseconds.
CREATE TABLE pipeline_jobs (
    job_id            TEXT PRIMARY KEY,
    idempotency_key   TEXT NOT NULL,
    job_type          TEXT NOT NULL,
    symbol            TEXT NOT NULL,
    asof              TEXT NOT NULL,
    requested_by      TEXT NOT NULL,
    status            TEXT NOT NULL,
    attempt_count     INTEGER NOT NULL DEFAULT 0,
    max_attempts      INTEGER NOT NULL,
    visible_at        BIGINT,
    worker_id         TEXT,
    lease_expires_at  BIGINT,
    heartbeat_at      BIGINT,
    claim_version     BIGINT NOT NULL DEFAULT 0,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    started_at        BIGINT,
    finished_at       BIGINT,
    error_code        TEXT,
    error_message     TEXT,
    error_attempt     INTEGER,
    result_ref        TEXT,
    redriven_at       BIGINT
);
-- One active job per key: the database refuses a second queued, running or
-- succeeded row, whoever inserts it.
CREATE UNIQUE INDEX pipeline_jobs_active_key ON pipeline_jobs (idempotency_key)
    WHERE status IN ('queued', 'running', 'succeeded');
CREATE INDEX pipeline_jobs_claim ON pipeline_jobs (visible_at) WHERE status = 'queued';
CREATE INDEX pipeline_jobs_lease ON pipeline_jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX pipeline_jobs_status ON pipeline_jobs (status, job_id);

-- What the scheduler has enqueued: one row per (type, symbol, day), so two
-- pods scheduling at once, or a pod catching up, enqueue a day once.
CREATE TABLE pipeline_schedule_runs (
    job_type      TEXT NOT NULL,
    symbol        TEXT NOT NULL,
    asof          TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    scheduled_at  BIGINT NOT NULL,
    PRIMARY KEY (job_type, symbol, asof)
);

-- Keyring-sealed settings (the object storage credentials).
CREATE TABLE pipeline_secrets (
    name                TEXT PRIMARY KEY,
    public_value        TEXT NOT NULL,
    secret_encrypted    BLOB NOT NULL,
    secret_dek_wrapped  BLOB NOT NULL,
    secret_kek_id       TEXT NOT NULL,
    secret_encryption_version INTEGER NOT NULL,
    updated_at          BIGINT NOT NULL
);

-- +goose Down
DROP TABLE pipeline_secrets;
DROP TABLE pipeline_schedule_runs;
DROP TABLE pipeline_jobs;
