-- +goose Up
-- Edges registered with central; their sync secrets are sealed by the
-- keyring exactly like requesters' webhook secrets.
CREATE TABLE edges (
    id                                   TEXT PRIMARY KEY,
    name                                 TEXT NOT NULL,
    secret_encrypted                     BLOB NOT NULL,
    secret_dek_wrapped                   BLOB NOT NULL,
    secret_kek_id                        TEXT NOT NULL,
    secret_encryption_version            INTEGER NOT NULL,
    secret_version                       INTEGER NOT NULL DEFAULT 1,
    previous_secret_encrypted            BLOB,
    previous_secret_dek_wrapped          BLOB,
    previous_secret_kek_id               TEXT,
    previous_secret_encryption_version   INTEGER,
    previous_secret_version              INTEGER,
    previous_secret_expires_at           BIGINT,
    disabled_at                          BIGINT,
    created_at                           BIGINT NOT NULL,
    updated_at                           BIGINT NOT NULL,
    last_seen_at                         BIGINT,
    version                              TEXT,
    last_status                          TEXT,
    events_total                         BIGINT NOT NULL DEFAULT 0,
    dropped_total                        BIGINT NOT NULL DEFAULT 0
);

-- One row per event an edge shipped; event_id (edge:job:entry) makes a
-- resent batch a no-op. ts is the edge's clock (Unix ms), received_at
-- central's (Unix µs); entry_ms/entry_seq order a job's events.
CREATE TABLE edge_events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id     TEXT NOT NULL UNIQUE,
    edge_id      TEXT NOT NULL REFERENCES edges(id),
    job_id       TEXT NOT NULL,
    entry_id     TEXT NOT NULL,
    entry_ms     BIGINT NOT NULL,
    entry_seq    BIGINT NOT NULL,
    type         TEXT NOT NULL,
    step         TEXT NOT NULL,
    task         TEXT,
    ts           BIGINT NOT NULL,
    data         TEXT NOT NULL,
    received_at  BIGINT NOT NULL
);
CREATE INDEX edge_events_job ON edge_events (edge_id, job_id, entry_ms, entry_seq);
CREATE INDEX edge_events_day ON edge_events (edge_id, ts);
CREATE INDEX edge_events_received ON edge_events (received_at);

-- One row per edge job, kept current by the ingest, so fleet queries never
-- scan events. Times are the edge's (Unix ms).
CREATE TABLE edge_jobs (
    edge_id        TEXT NOT NULL REFERENCES edges(id),
    job_id         TEXT NOT NULL,
    task           TEXT,
    status         TEXT NOT NULL,
    first_ts       BIGINT NOT NULL,
    last_ts        BIGINT NOT NULL,
    started_ts     BIGINT,
    finished_ts    BIGINT,
    terminal_type  TEXT,
    error_code     TEXT,
    events         BIGINT NOT NULL DEFAULT 0,
    dropped        BIGINT NOT NULL DEFAULT 0,
    updated_at     BIGINT NOT NULL,
    PRIMARY KEY (edge_id, job_id)
);
CREATE INDEX edge_jobs_recent ON edge_jobs (edge_id, last_ts DESC, job_id DESC);

-- Delta events an edge dropped from its full spool, as it reported them.
CREATE TABLE edge_gaps (
    gap_id          TEXT PRIMARY KEY,
    edge_id         TEXT NOT NULL REFERENCES edges(id),
    job_id          TEXT NOT NULL,
    type            TEXT NOT NULL,
    count           BIGINT NOT NULL,
    first_entry_id  TEXT NOT NULL,
    last_entry_id   TEXT NOT NULL,
    first_ts        BIGINT NOT NULL,
    last_ts         BIGINT NOT NULL,
    received_at     BIGINT NOT NULL
);
CREATE INDEX edge_gaps_job ON edge_gaps (edge_id, job_id);

-- +goose Down
DROP TABLE edge_gaps;
DROP TABLE edge_jobs;
DROP TABLE edge_events;
DROP TABLE edges;
