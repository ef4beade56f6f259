-- +goose Up
CREATE TABLE operators (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL,
    disabled_at BIGINT
);

-- +goose Down
DROP TABLE operators;
