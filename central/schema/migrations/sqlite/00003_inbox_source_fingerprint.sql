-- +goose Up
-- A refresh of a job's credentials must keep the object its source URL
-- names. That identity used to be read out of the sealed credentials, which
-- made the API decrypt them; the fingerprint (SHA-256 over the job id and
-- the URL's object identity, never a signature) lets it judge a refresh
-- without the keyring, so credentials are opened only by the worker that
-- runs the job. Rows written before this version stay NULL: the fingerprint
-- needs the sealed URL, which SQL cannot open (the inbox judges such a row
-- the old way once and writes its fingerprint then).
ALTER TABLE inbox_jobs ADD COLUMN source_fingerprint TEXT;

-- +goose Down
ALTER TABLE inbox_jobs DROP COLUMN source_fingerprint;
