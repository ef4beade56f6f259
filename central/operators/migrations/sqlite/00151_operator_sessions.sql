-- +goose Up
-- Console sign-ins: the cookie carries a random session id, the table its
-- SHA-256 only. A session is honoured only while its operator is enabled.
CREATE TABLE operator_sessions (
    id_hash     TEXT PRIMARY KEY,
    operator_id TEXT NOT NULL REFERENCES operators(id),
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX operator_sessions_expiry ON operator_sessions (expires_at);
CREATE INDEX operator_sessions_operator ON operator_sessions (operator_id);

-- +goose Down
DROP TABLE operator_sessions;
