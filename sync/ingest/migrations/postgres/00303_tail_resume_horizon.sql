-- +goose Up
-- The fleet tail's horizon when the row was inserted. A resume id may come
-- from the operator API, which reads rows above the horizon: a transaction
-- with a smaller xid still open then commits later, and a cursor at the
-- row's (xid, seq) would skip its rows for good. Every such transaction
-- was open when this row's insert took its snapshot, so its xid is at or
-- above this value: a resume from the row starts here. Added without a
-- default first so the rows already stored keep NULL (their horizon is
-- unknown) instead of the time of this migration; ingest sets it once per
-- statement.
ALTER TABLE edge_events ADD COLUMN xmin_at_insert xid8;
ALTER TABLE edge_events ALTER COLUMN xmin_at_insert SET DEFAULT pg_snapshot_xmin(pg_current_snapshot());

-- +goose Down
ALTER TABLE edge_events DROP COLUMN xmin_at_insert;
