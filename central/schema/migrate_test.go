package schema_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// setDirs are the packages whose migration sets euterpe-central applies,
// in the order it applies them: the core schema and operators
// (serve.NewApp), then outbox, ingest and pipeline (cmd/euterpe-central's
// register). The files are read from the source tree, the same files
// each package embeds.
var setDirs = []string{"central/schema", "central/operators", "central/outbox", "sync/ingest", "central/pipeline"}

// repoRoot is the module root, two levels above this package.
const repoRoot = "../.."

func centralSets(t testing.TB) []sqldb.Migrations {
	t.Helper()
	sets := make([]sqldb.Migrations, 0, len(setDirs))
	for _, d := range setDirs {
		sets = append(sets, sqldb.Embedded(os.DirFS(filepath.Join(repoRoot, d))))
	}
	return sets
}

// TestEveryMigrationSetCovered: every migrations directory in the
// central and sync trees is one of the sets these tests apply, so a new
// set cannot escape them.
func TestEveryMigrationSetCovered(t *testing.T) {
	var found []string
	for _, top := range []string{"central", "sync"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "migrations" {
				rel, err := filepath.Rel(repoRoot, filepath.Dir(p))
				if err != nil {
					return err
				}
				found = append(found, filepath.ToSlash(rel))
				return fs.SkipDir
			}
			return nil
		})
		require.NoError(t, err)
	}
	assert.ElementsMatch(t, setDirs, found)
	// Each version exists for both engines under the same name.
	for i, set := range centralSets(t) {
		pg, err := fs.Glob(set.Postgres, "*.sql")
		require.NoError(t, err)
		lite, err := fs.Glob(set.SQLite, "*.sql")
		require.NoError(t, err)
		assert.NotEmpty(t, pg, setDirs[i])
		assert.Equal(t, pg, lite, setDirs[i])
	}
	// And the embedded core set is the one on disk.
	onDisk, err := fs.Glob(os.DirFS(filepath.Join(repoRoot, "central/schema/migrations/sqlite")), "*.sql")
	require.NoError(t, err)
	embedded, err := fs.Glob(schema.Migrations().SQLite, "*.sql")
	require.NoError(t, err)
	assert.Equal(t, onDisk, embedded)
}

// merged is what sqldb.Migrate applies for engine e: every set's files in
// one directory.
func merged(t testing.TB, e sqldb.Engine, sets []sqldb.Migrations, keep func(set int, name string) bool) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	for i, s := range sets {
		src := s.SQLite
		if e == sqldb.Postgres {
			src = s.Postgres
		}
		names, err := fs.Glob(src, "*.sql")
		require.NoError(t, err)
		require.NotEmpty(t, names, "set %d (%s) has no %s migrations", i, setDirs[i], e)
		slices.Sort(names)
		for j, n := range names {
			if keep != nil && !keep(j, n) {
				continue
			}
			b, err := fs.ReadFile(src, n)
			require.NoError(t, err)
			out[path.Base(n)] = &fstest.MapFile{Data: b, Mode: 0o444}
		}
	}
	return out
}

// provider is a goose provider configured as sqldb.Migrate configures its
// own, over fsys.
func provider(t testing.TB, db *sqldb.DB, fsys fs.FS) *goose.Provider {
	t.Helper()
	dialect := goose.DialectSQLite3
	if db.Engine == sqldb.Postgres {
		dialect = goose.DialectPostgres
	}
	p, err := goose.NewProvider(dialect, db.DB, fsys,
		goose.WithTableName(sqldb.VersionTable), goose.WithAllowOutofOrder(true), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	return p
}

// dump describes the database's structure (tables, columns, indexes,
// triggers), outside goose's own table, one line per item, sorted.
func dump(t testing.TB, db *sqldb.DB) []string {
	t.Helper()
	var q string
	if db.Engine == sqldb.Postgres {
		q = `SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || COALESCE(column_default, '')
			FROM information_schema.columns WHERE table_schema = current_schema() AND table_name <> '` + sqldb.VersionTable + `'
			UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename <> '` + sqldb.VersionTable + `'
			UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger WHERE NOT tgisinternal
			UNION ALL SELECT 'function ' || proname FROM pg_proc WHERE pronamespace = current_schema()::regnamespace`
	} else {
		q = `SELECT type || ' ' || name || ' ' || COALESCE(sql, '') FROM sqlite_master
			WHERE name NOT LIKE 'sqlite_%' AND tbl_name <> '` + sqldb.VersionTable + `'`
	}
	rows, err := db.QueryContext(context.Background(), q)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	slices.Sort(out)
	return out
}

// TestMigrateTwiceIsNoOp: a second migrate (every pod's start runs one)
// applies nothing and changes nothing.
func TestMigrateTwiceIsNoOp(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			ctx := context.Background()
			db := sqltest.Open(t, e)
			sets := centralSets(t)
			applied, err := sqldb.Migrate(ctx, db, sets...)
			require.NoError(t, err)
			require.NotEmpty(t, applied)
			before := dump(t, db)
			again, err := sqldb.Migrate(ctx, db, sets...)
			require.NoError(t, err)
			assert.Empty(t, again, "second run applied migrations")
			assert.Equal(t, before, dump(t, db))
		})
	}
}

// TestMigrateDownAndUpAgain: every migration has a down that undoes it:
// all the way down leaves no table of ours, and up again gives the same
// schema as a fresh database.
func TestMigrateDownAndUpAgain(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			ctx := context.Background()
			fresh := sqltest.Open(t, e, centralSets(t)...)
			want := dump(t, fresh)
			require.Greater(t, len(want), 20, "a schema to compare")

			db := sqltest.Open(t, e, centralSets(t)...)
			p := provider(t, db, merged(t, e, centralSets(t), nil))
			down, err := p.DownTo(ctx, 0)
			require.NoError(t, err)
			require.Len(t, down, len(p.ListSources()), "every migration went down")
			assert.Empty(t, dump(t, db), "left behind after every down")
			_, err = p.Up(ctx)
			require.NoError(t, err)
			assert.Equal(t, want, dump(t, db))
			// And one step at a time, from the top.
			for range p.ListSources() {
				_, err := p.Down(ctx)
				require.NoError(t, err)
				_, err = p.UpByOne(ctx)
				require.NoError(t, err)
				_, err = p.Down(ctx)
				require.NoError(t, err)
			}
			_, err = p.Up(ctx)
			require.NoError(t, err)
			assert.Equal(t, want, dump(t, db))
		})
	}
}

// columns lists a table's column names.
func columns(t testing.TB, db *sqldb.DB, table string) []string {
	t.Helper()
	q := `SELECT name FROM pragma_table_info(?)`
	if db.Engine == sqldb.Postgres {
		q = `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?`
	}
	rows, err := db.QueryContext(context.Background(), db.Rebind(q), table)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		out = append(out, c)
	}
	require.NoError(t, rows.Err())
	return out
}

func exec(t testing.TB, db *sqldb.DB, q string, args ...any) {
	t.Helper()
	_, err := db.ExecContext(context.Background(), db.Rebind(q), args...)
	require.NoError(t, err, "%s", q)
}

// seedFirstVersions writes the rows of a deployment that has only the first
// migration of each set: a requester with a queued job, its outbox
// events, an operator, a pipeline job and its schedule mark, an edge with
// events, a job summary and a gap.
func seedFirstVersions(t testing.TB, db *sqldb.DB) {
	const now = 1_700_000_000_000_000 // µs
	exec(t, db, `INSERT INTO requesters (id, name, api_key_hash, webhook_secret_encrypted, webhook_secret_dek_wrapped,
		webhook_secret_kek_id, webhook_secret_encryption_version, created_at, updated_at)
		VALUES ('req-1', 'old requester', 'hash-1', ?, ?, 'kek-1', 1, ?, ?)`, []byte{1}, []byte{2}, now, now)
	exec(t, db, `INSERT INTO inbox_jobs (id, requester_id, idempotency_key, status, scheduled_at, next_attempt_at,
		source_bucket, source_key, output_bucket, output_prefix, renditions, status_webhook_url, created_at, updated_at)
		VALUES ('job-1', 'req-1', 'idem-1', 'queued', ?, ?, 'in', 'a.wav', 'out', 'o/job-1/', ?, 'https://hooks.example/h', ?, ?)`,
		now, now, `[{"name":"o","codec":"opus","bitrate_kbps":64}]`, now, now)
	exec(t, db, `INSERT INTO job_outbox_events (event_id, job_id, requester_id, sequence, event_type, status, webhook_url,
		payload, next_attempt_at, created_at)
		VALUES ('ev-1', 'job-1', 'req-1', 1, 'job.queued', 'pending', 'https://hooks.example/h', '{}', ?, ?)`, now, now)
	exec(t, db, `INSERT INTO job_outbox_events (event_id, job_id, requester_id, sequence, event_type, status, webhook_url,
		payload, attempt_count, next_attempt_at, last_error, dead_lettered_at, created_at)
		VALUES ('ev-2', 'job-1', 'req-1', 2, 'job.claimed', 'dead_letter', 'https://hooks.example/h', '{}', 10, ?, 'gone', ?, ?)`, now, now, now)
	exec(t, db, `INSERT INTO idempotency_keys (scope, idem_key, request_hash, job_id, response_status, response_body, created_at, expires_at)
		VALUES ('req-1', 'idem-1', 'h', 'job-1', 202, ?, ?, ?)`, `{"job_id":"job-1"}`, now, now+1)
	exec(t, db, `INSERT INTO operators (id, name, token_hash, created_at) VALUES ('op-1', 'alice', 'th-1', ?)`, now)
	exec(t, db, `INSERT INTO pipeline_jobs (job_id, idempotency_key, job_type, symbol, asof, requested_by, status,
		max_attempts, visible_at, created_at, updated_at)
		VALUES ('pj-1', 'edge_daily:e1:2026-01-01', 'edge_daily', 'e1', '2026-01-01', 'scheduler', 'queued', 5, ?, ?, ?)`, now, now, now)
	exec(t, db, `INSERT INTO pipeline_schedule_runs (job_type, symbol, asof, job_id, scheduled_at)
		VALUES ('edge_daily', 'e1', '2026-01-01', 'pj-1', ?)`, now)
	exec(t, db, `INSERT INTO edges (id, name, secret_encrypted, secret_dek_wrapped, secret_kek_id, secret_encryption_version,
		created_at, updated_at) VALUES ('e1', 'jetson', ?, ?, 'kek-1', 1, ?, ?)`, []byte{1}, []byte{2}, now, now)
	for i := range 2 {
		exec(t, db, `INSERT INTO edge_events (event_id, edge_id, job_id, entry_id, entry_ms, entry_seq, type, step, task, ts, data, received_at)
			VALUES (?, 'e1', 'ej-1', ?, 1000, ?, 'status', 'queued', 'chat', 1000, '{}', ?)`,
			fmt.Sprintf("e1:ej-1:1000-%d", i), fmt.Sprintf("1000-%d", i), i, now)
	}
	exec(t, db, `INSERT INTO edge_jobs (edge_id, job_id, task, status, first_ts, last_ts, events, updated_at)
		VALUES ('e1', 'ej-1', 'chat', 'queued', 1000, 1000, 2, ?)`, now)
	exec(t, db, `INSERT INTO edge_gaps (gap_id, edge_id, job_id, type, count, first_entry_id, last_entry_id, first_ts, last_ts, received_at)
		VALUES ('g1', 'e1', 'ej-1', 'delta', 3, '1000-2', '1000-4', 1000, 1000, ?)`, now)
}

// TestUpgradeWithData: a database that has only the first migration of
// every set, with rows in every table, upgrades to the latest schema
// through sqldb.Migrate (the later versions below the highest applied one
// go in out of order); every row survives, the added columns hold what the
// code reading them expects, and the queues still claim the old rows.
func TestUpgradeWithData(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			ctx := context.Background()
			db := sqltest.Open(t, e)
			sets := centralSets(t)
			first := provider(t, db, merged(t, e, sets, func(i int, _ string) bool { return i == 0 }))
			res, err := first.Up(ctx)
			require.NoError(t, err)
			require.Len(t, res, len(sets))
			seedFirstVersions(t, db)

			applied, err := sqldb.Migrate(ctx, db, sets...)
			require.NoError(t, err)
			require.NotEmpty(t, applied)
			// Nothing is left pending: the database is at the latest schema.
			all := provider(t, db, merged(t, e, sets, nil))
			pending, err := all.HasPending(ctx)
			require.NoError(t, err)
			assert.False(t, pending)
			assert.Equal(t, dump(t, sqltest.Open(t, e, sets...)), dump(t, db), "upgraded schema differs from a fresh one")

			one := func(q string, args ...any) *sql.Row {
				return db.QueryRowContext(ctx, db.Rebind(q), args...)
			}
			// Inbox: the old job keeps its values and defaults.
			var prio, maxAtt, attempts int
			var claimVer, seq int64
			var status string
			require.NoError(t, one(`SELECT status, priority, max_attempts, attempt_count, claim_version, event_seq FROM inbox_jobs WHERE id = 'job-1'`).
				Scan(&status, &prio, &maxAtt, &attempts, &claimVer, &seq))
			assert.Equal(t, []any{schema.StatusQueued, 0, 5, 0, int64(0), int64(0)}, []any{status, prio, maxAtt, attempts, claimVer, seq})
			// It has no source fingerprint (only the sealed credentials could
			// give one): the inbox judges its first refresh by opening them.
			var fingerprint sql.NullString
			require.NoError(t, one(`SELECT source_fingerprint FROM inbox_jobs WHERE id = 'job-1'`).Scan(&fingerprint))
			assert.False(t, fingerprint.Valid)

			// Outbox: the per-row attempt ceiling is gone, redriven_at is
			// added empty, both events kept.
			cols := columns(t, db, "job_outbox_events")
			assert.NotContains(t, cols, "max_attempts")
			assert.Contains(t, cols, "redriven_at")
			var n int
			require.NoError(t, one(`SELECT COUNT(*) FROM job_outbox_events WHERE redriven_at IS NULL`).Scan(&n))
			assert.Equal(t, 2, n)
			var dead sql.NullInt64
			require.NoError(t, one(`SELECT dead_lettered_at FROM job_outbox_events WHERE event_id = 'ev-2' AND status = 'dead_letter'`).Scan(&dead))
			assert.True(t, dead.Valid)

			// Operators: the old operator can hold a session.
			exec(t, db, `INSERT INTO operator_sessions (id_hash, operator_id, created_at, expires_at) VALUES ('s1', 'op-1', 1, 2)`)

			// Pipeline: the old mark has no refusal; the old job still holds
			// its key against a second active job.
			var code, msg sql.NullString
			require.NoError(t, one(`SELECT error_code, error_message FROM pipeline_schedule_runs WHERE job_id = 'pj-1'`).Scan(&code, &msg))
			assert.False(t, code.Valid || msg.Valid)
			_, err = db.ExecContext(ctx, db.Rebind(`INSERT INTO pipeline_jobs (job_id, idempotency_key, job_type, symbol, asof,
				requested_by, status, max_attempts, created_at, updated_at)
				VALUES ('pj-2', 'edge_daily:e1:2026-01-01', 'edge_daily', 'e1', '2026-01-01', 'op', 'queued', 5, 1, 1)`))
			assert.Error(t, err, "a second active job for the same key")

			// Sync: the old summary says no status event is known (-1), the
			// edge no heartbeat time; nonces can be stored.
			var ems, eseq int64
			require.NoError(t, one(`SELECT status_entry_ms, status_entry_seq FROM edge_jobs WHERE edge_id = 'e1' AND job_id = 'ej-1'`).Scan(&ems, &eseq))
			assert.Equal(t, []int64{-1, -1}, []int64{ems, eseq})
			var lastAt sql.NullInt64
			require.NoError(t, one(`SELECT last_status_at FROM edges WHERE id = 'e1'`).Scan(&lastAt))
			assert.False(t, lastAt.Valid)
			exec(t, db, `INSERT INTO edge_sync_nonces (nonce, expires_at) VALUES ('n1', 1)`)
			require.NoError(t, one(`SELECT COUNT(*) FROM edge_gaps`).Scan(&n))
			assert.Equal(t, 1, n)

			// The fleet tail reads events in (xid, seq) order on Postgres:
			// the old events have one, and come before any written later.
			exec(t, db, `INSERT INTO edge_events (event_id, edge_id, job_id, entry_id, entry_ms, entry_seq, type, step, task, ts, data, received_at)
				VALUES ('e1:ej-1:2000-0', 'e1', 'ej-1', '2000-0', 2000, 0, 'status', 'running', 'chat', 2000, '{}', 1)`)
			order := `SELECT event_id FROM edge_events ORDER BY seq`
			if e == sqldb.Postgres {
				order = `SELECT event_id FROM edge_events ORDER BY xid::text::bigint, seq`
			}
			rows, err := db.QueryContext(ctx, order)
			require.NoError(t, err)
			var ids []string
			for rows.Next() {
				var id string
				require.NoError(t, rows.Scan(&id))
				ids = append(ids, id)
			}
			require.NoError(t, rows.Err())
			require.NoError(t, rows.Close())
			assert.Equal(t, []string{"e1:ej-1:1000-0", "e1:ej-1:1000-1", "e1:ej-1:2000-0"}, ids)

			// Every table the seed wrote still has its rows.
			for table, want := range map[string]int{
				"requesters": 1, "inbox_jobs": 1, "job_outbox_events": 2, "idempotency_keys": 1, "operators": 1,
				"pipeline_jobs": 1, "pipeline_schedule_runs": 1, "edges": 1, "edge_events": 3, "edge_jobs": 1,
			} {
				require.NoError(t, one(`SELECT COUNT(*) FROM `+table).Scan(&n), table)
				assert.Equal(t, want, n, table)
			}
			// 00002 is below the highest version applied before (00400):
			// it went in out of order.
			assert.True(t, slices.ContainsFunc(applied, func(s string) bool {
				return strings.HasPrefix(path.Base(s), "00002_")
			}), "applied %v", applied)

			// The queues claim the old rows: the inbox its queued job, the
			// dispatcher its pending event (the dead-lettered one stays).
			inboxQ := &lease.Queue{DB: db, Spec: schema.InboxLease, Machine: inbox.Transitions}
			claims, err := inboxQ.Claim(ctx, "w1", 10, time.Minute)
			require.NoError(t, err)
			if assert.Len(t, claims, 1) {
				assert.Equal(t, "job-1", claims[0].ID)
				assert.Equal(t, int64(1), claims[0].Version)
			}
			outboxQ := &lease.Queue{DB: db, Spec: schema.OutboxLease, Machine: schema.OutboxTransitions}
			claims, err = outboxQ.Claim(ctx, "w1", 10, time.Minute)
			require.NoError(t, err)
			if assert.Len(t, claims, 1) {
				assert.Equal(t, "ev-1", claims[0].ID)
			}
		})
	}
}
