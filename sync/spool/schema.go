package spool

// schema is sync.db at user_version 2. events.seq is the capture order (an
// AUTOINCREMENT key never reuses a value, so a batch is always a prefix of
// what is left); the unique (job_id, entry_id) keeps a capture entry
// spooled once. size is the byte cost the budget counts.
//
// Version 2 added inflight and tombstones. Every statement is IF NOT
// EXISTS, so a version-1 file gains them on open and keeps its rows.
// inflight is the top seq of the batch the sender has out, so a restart
// still keeps the budget off rows central may already have stored.
// tombstones are capture entries a move took (spooled or dropped) whose
// XDEL is not known to be done, so moving them again spools nothing.
// gaps_first finds a gap added again by AddGaps, and budget is the
// daemon's EUTERPE_SYNC_SPOOL_MAX_MB, which it records on every open for
// an operator's resend to stay within; being IF NOT EXISTS, they need no
// new version.
// Version 2 files written before every capture was tombstoned hold only
// dropped ones; their spooled entries are still caught by events' unique
// key.
const schema = `
CREATE TABLE IF NOT EXISTS events (
  seq      INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id   TEXT    NOT NULL,
  entry_id TEXT    NOT NULL,
  type     TEXT    NOT NULL,
  step     TEXT    NOT NULL,
  task     TEXT    NOT NULL,
  ts       INTEGER NOT NULL,
  data     TEXT    NOT NULL,
  size     INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_entry ON events(job_id, entry_id);
CREATE INDEX IF NOT EXISTS events_delta ON events(seq) WHERE type = 'delta';
CREATE TABLE IF NOT EXISTS gaps (
  id             INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id         TEXT    NOT NULL,
  type           TEXT    NOT NULL,
  count          INTEGER NOT NULL,
  first_entry_id TEXT    NOT NULL,
  last_entry_id  TEXT    NOT NULL,
  first_ts       INTEGER NOT NULL,
  last_ts        INTEGER NOT NULL,
  sealed         INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS gaps_open ON gaps(job_id) WHERE sealed = 0;
CREATE INDEX IF NOT EXISTS gaps_first ON gaps(job_id, first_entry_id);
CREATE TABLE IF NOT EXISTS quarantine (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  at_ms    INTEGER NOT NULL,
  status   INTEGER NOT NULL,
  code     TEXT    NOT NULL,
  message  TEXT    NOT NULL,
  events   INTEGER NOT NULL,
  gaps     INTEGER NOT NULL,
  body     TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS inflight (
  id  INTEGER PRIMARY KEY CHECK (id = 1),
  seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS budget (
  id        INTEGER PRIMARY KEY CHECK (id = 1),
  max_bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tombstones (
  job_id   TEXT    NOT NULL,
  entry_id TEXT    NOT NULL,
  at_ms    INTEGER NOT NULL,
  PRIMARY KEY (job_id, entry_id)
) WITHOUT ROWID;
PRAGMA user_version = ` + schemaVersion + `;
`

// schemaVersion is the user_version schema sets: an operator's command
// (OpenExisting) works only on a file the daemon has brought to it.
const schemaVersion = "2"
