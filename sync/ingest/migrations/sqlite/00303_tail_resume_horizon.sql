-- +goose Up
-- Nothing on SQLite: writers take turns, so seq order is commit order and
-- a tail resumes at the seq itself (see the Postgres migration). The file
-- keeps the version numbers of both engines the same.

-- +goose Down
