-- +goose Up
CREATE TABLE requesters (
    id                                   TEXT PRIMARY KEY,
    name                                 TEXT NOT NULL,
    api_key_hash                         TEXT NOT NULL UNIQUE,
    webhook_secret_encrypted             BLOB NOT NULL,
    webhook_secret_dek_wrapped           BLOB NOT NULL,
    webhook_secret_kek_id                TEXT NOT NULL,
    webhook_secret_encryption_version    INTEGER NOT NULL,
    webhook_secret_version               INTEGER NOT NULL DEFAULT 1,
    previous_webhook_secret_encrypted    BLOB,
    previous_webhook_secret_dek_wrapped  BLOB,
    previous_webhook_secret_kek_id       TEXT,
    previous_webhook_secret_encryption_version INTEGER,
    previous_webhook_secret_version      INTEGER,
    previous_webhook_secret_expires_at   BIGINT,
    disabled_at                          BIGINT,
    created_at                           BIGINT NOT NULL,
    updated_at                           BIGINT NOT NULL
);

CREATE TABLE inbox_jobs (
    id                     TEXT PRIMARY KEY,
    requester_id           TEXT NOT NULL REFERENCES requesters(id),
    idempotency_key        TEXT,
    status                 TEXT NOT NULL,
    priority               INTEGER NOT NULL DEFAULT 0,
    scheduled_at           BIGINT NOT NULL,
    next_attempt_at        BIGINT NOT NULL,
    worker_id              TEXT,
    lease_expires_at       BIGINT,
    heartbeat_at           BIGINT,
    claim_version          BIGINT NOT NULL DEFAULT 0,
    attempt_count          INTEGER NOT NULL DEFAULT 0,
    max_attempts           INTEGER NOT NULL DEFAULT 5,
    refresh_attempt_count  INTEGER NOT NULL DEFAULT 0,
    event_seq              BIGINT NOT NULL DEFAULT 0,
    credential_version     INTEGER NOT NULL DEFAULT 1,
    source_url             TEXT,
    source_bucket          TEXT,
    source_key             TEXT,
    source_endpoint        TEXT,
    source_region          TEXT,
    output_bucket          TEXT NOT NULL,
    output_prefix          TEXT NOT NULL,
    output_endpoint        TEXT,
    output_region          TEXT,
    renditions             TEXT NOT NULL,
    status_webhook_url     TEXT,
    refresh_url            TEXT,
    metadata               TEXT,
    outputs                TEXT,
    error_code             TEXT,
    last_error             TEXT CHECK (length(last_error) <= 512),
    storage_creds_encrypted          BLOB,
    storage_creds_dek_wrapped        BLOB,
    storage_creds_kek_id             TEXT,
    storage_creds_encryption_version INTEGER,
    created_at             BIGINT NOT NULL,
    updated_at             BIGINT NOT NULL,
    started_at             BIGINT,
    finished_at            BIGINT,
    pruned_at              BIGINT
);
-- claim scan: queued rows by priority and due time (partial: rows leave it
-- when claimed, so the scan never walks finished jobs)
CREATE INDEX inbox_jobs_claim ON inbox_jobs (priority DESC, next_attempt_at, id)
    WHERE status = 'queued';
-- stale lease recovery
CREATE INDEX inbox_jobs_lease ON inbox_jobs (lease_expires_at)
    WHERE status IN ('claimed', 'fetching', 'processing', 'uploading');
-- retention pruning of finished jobs
CREATE INDEX inbox_jobs_finished ON inbox_jobs (finished_at)
    WHERE status IN ('succeeded', 'failed', 'dead_letter') AND pruned_at IS NULL;

CREATE TABLE job_outbox_events (
    event_id          TEXT PRIMARY KEY,
    job_id            TEXT NOT NULL,
    requester_id      TEXT NOT NULL,
    sequence          BIGINT NOT NULL,
    event_type        TEXT NOT NULL,
    status            TEXT NOT NULL,
    webhook_url       TEXT,
    payload           TEXT NOT NULL,
    worker_id         TEXT,
    lease_expires_at  BIGINT,
    heartbeat_at      BIGINT,
    claim_version     BIGINT NOT NULL DEFAULT 0,
    attempt_count     INTEGER NOT NULL DEFAULT 0,
    max_attempts      INTEGER NOT NULL DEFAULT 10,
    next_attempt_at   BIGINT NOT NULL,
    last_error        TEXT CHECK (length(last_error) <= 512),
    last_status_code  INTEGER,
    delivered_at      BIGINT,
    dead_lettered_at  BIGINT,
    created_at        BIGINT NOT NULL,
    UNIQUE (job_id, sequence)
);
-- outbox polling and delivery lease recovery; finished events leave the index
CREATE INDEX job_outbox_events_poll ON job_outbox_events (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX job_outbox_events_lease ON job_outbox_events (lease_expires_at)
    WHERE status = 'delivering';

CREATE TABLE idempotency_keys (
    scope          TEXT NOT NULL,
    idem_key       TEXT NOT NULL,
    request_hash   TEXT NOT NULL,
    job_id         TEXT,
    response_status INTEGER NOT NULL,
    response_body  TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    PRIMARY KEY (scope, idem_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE job_outbox_events;
DROP TABLE inbox_jobs;
DROP TABLE requesters;
