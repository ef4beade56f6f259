package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Migration is one versioned schema step. Up runs inside the transaction
// that also records the version, so a step either fully happens, version
// included, or not at all.
type Migration struct {
	Version int
	Name    string
	Up      func(ctx context.Context, tx *sql.Tx) error
}

// Migrations is the schema history, oldest first.
var Migrations = []Migration{
	{1, "0001_jobs_and_library_files", execAll(ddlJobs, ddlScanSessions, ddlLibraryFiles)},
	{2, "0002_thumbnails", execAll(ddlThumbnails, ddlCleanup, ddlIORate)},
	{3, "0003_wal_maintenance_jobs", execAll(ddlWAL)},
	{4, "0004_delete_decisions", execAll(ddlDeleteDecisions,
		`CREATE INDEX IF NOT EXISTS ix_delete_decisions_job ON delete_decisions(job_id)`)},
	{10, "0010_lowercase_enums_single_active_scan_hash", migrate0010},
	{11, "0011_duplicate_group_query_indexes", migrate0011},
	{12, "0012_source_identity", migrate0012},
	{13, "0013_scan_session_recovery", migrate0013},
	// A scan asks whether a delete trashed a missing row's file during it
	// (UpsertFiles); without this index each ask reads every decision.
	{14, "0014_delete_decisions_by_file", execAll(
		`CREATE INDEX IF NOT EXISTS ix_delete_decisions_file ON delete_decisions(file_id, decided_at)`)},
}

// ErrMigration wraps every migration failure.
var ErrMigration = errors.New("library migration failed")

func execAll(stmts ...string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("%.60s: %w", s, err)
			}
		}
		return nil
	}
}

// Migrate applies every migration not yet recorded in schema_migrations.
// A database from before versioning (tables present, no version table) is
// upgraded in place: the early steps only create what is missing.
func Migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
  version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("%w: version table: %w", ErrMigration, err)
	}
	for _, m := range Migrations {
		err := sqldb.InTx(ctx, db, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if err := m.Up(ctx, tx); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, time.Now().UnixMilli())
			return err
		})
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrMigration, m.Name, err)
		}
	}
	return nil
}

// AppliedVersions lists recorded migration versions, ascending.
func AppliedVersions(ctx context.Context, db *sql.DB) ([]int, error) {
	rows, err := db.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

type queryer interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// TableColumns lists the columns of table, bare or qualified by its
// schema ("main.jobs").
func TableColumns(ctx context.Context, q queryer, table string) (map[string]bool, error) {
	query, args := sqldb.SQLiteTableInfo("name", table)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		out[name] = true
	}
	return out, rows.Err()
}

// ensureColumns adds every column of cols that table lacks.
func ensureColumns(ctx context.Context, tx *sql.Tx, table string, cols []Column) error {
	have, err := TableColumns(ctx, tx, table)
	if err != nil {
		return err
	}
	for _, c := range cols {
		if have[c.Name] {
			continue
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s", table, c.Name, c.Def)); err != nil {
			return fmt.Errorf("backfill %s.%s: %w", table, c.Name, err)
		}
	}
	return nil
}

// Recovery metadata written to scan/hash rows demoted by 0010.
const (
	ErrCodeMigrationDuplicateActive = "migration_duplicate_active"
)

var protocolTables = map[string][]Column{
	"jobs":                   jobsColumns,
	"scan_sessions":          scanSessionColumns,
	"thumbnails":             thumbnailColumns,
	"thumbnail_cleanup_jobs": cleanupColumns,
	"wal_maintenance_jobs":   walColumns,
}

// migrate0010 brings legacy job tables to the protocol: missing columns
// added, enums lowercased (§2), duplicate active scan/hash rows resolved to
// one deterministic winner (§5), the single-active index rebuilt and the
// legal-value triggers (§3) installed.
func migrate0010(ctx context.Context, tx *sql.Tx) error {
	// A legacy file may claim early versions yet lack whole tables.
	if err := execAll(ddlJobs, ddlScanSessions, ddlThumbnails, ddlCleanup, ddlIORate, ddlWAL, ddlDeleteDecisions)(ctx, tx); err != nil {
		return err
	}
	for table, cols := range protocolTables {
		if err := ensureColumns(ctx, tx, table, cols); err != nil {
			return err
		}
	}
	// An index of that name from an earlier build may have a case-sensitive
	// predicate, under which an uppercase active row ('RUNNING') stood beside
	// a lowercase one: lowercasing them would violate it. It goes first; the
	// §5 index is rebuilt once the rows are normalised and resolved.
	if _, err := tx.ExecContext(ctx, `DROP INDEX IF EXISTS ix_jobs_single_active_scan_hash`); err != nil {
		return err
	}
	for _, l := range LegalValues {
		if l.Table == "library_files" {
			continue // 0011 owns library_files
		}
		if err := lowercase(ctx, tx, l.Table, l.Column); err != nil {
			return err
		}
	}
	if err := resolveDuplicateActive(ctx, tx); err != nil {
		return err
	}
	stmts := []string{
		`CREATE UNIQUE INDEX ix_jobs_single_active_scan_hash ON jobs((1))
  WHERE lower(status) IN ('pending', 'running') AND lower(kind) IN ('scan', 'hash')`,
		`CREATE INDEX IF NOT EXISTS ix_jobs_created ON jobs(created_at, id)`,
		`CREATE INDEX IF NOT EXISTS ix_jobs_status ON jobs(status, kind)`,
		`CREATE INDEX IF NOT EXISTS ix_thumbnails_status ON thumbnails(status, id)`,
		`CREATE INDEX IF NOT EXISTS ix_thumbnails_file ON thumbnails(file_id, format, max_size)`,
		`CREATE INDEX IF NOT EXISTS ix_thumbnails_group ON thumbnails(group_key, status)`,
		`CREATE INDEX IF NOT EXISTS ix_cleanup_status ON thumbnail_cleanup_jobs(status, execute_after)`,
		`CREATE INDEX IF NOT EXISTS ix_wal_status ON wal_maintenance_jobs(status, execute_after)`,
	}
	for _, l := range LegalValues {
		if l.Table != "library_files" {
			stmts = append(stmts, legalTriggers(l)...)
		}
	}
	return execAll(stmts...)(ctx, tx)
}

func lowercase(ctx context.Context, tx *sql.Tx, table, col string) error {
	q := fmt.Sprintf("UPDATE %[1]s SET %[2]s = lower(%[2]s) WHERE %[2]s <> lower(%[2]s)", table, col)
	if _, err := tx.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("lowercase %s.%s: %w", table, col, err)
	}
	return nil
}

// resolveDuplicateActive keeps one active scan/hash row. The winner is the
// running row with the latest heartbeat (lowest id on ties): it is the one
// most likely still owned by a live worker. With no running row, the oldest
// pending row wins (FIFO). Every other active row becomes retryable with
// ErrCodeMigrationDuplicateActive and its lease fields cleared.
func resolveDuplicateActive(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT id FROM jobs
WHERE status IN ('pending','running') AND kind IN ('scan','hash')
ORDER BY CASE status WHEN 'running' THEN 0 ELSE 1 END,
         CASE status WHEN 'running' THEN -COALESCE(worker_heartbeat_at, 0) ELSE 0 END,
         id`)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(ids) < 2 {
		return nil
	}
	winner := ids[0]
	now := time.Now().UnixMilli()
	for _, id := range ids[1:] {
		msg := fmt.Sprintf("recovered by migration 0010: job %d holds the single active scan/hash slot", winner)
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 'retryable', worker_id = NULL,
  worker_heartbeat_at = NULL, lease_expires_at = NULL, error_code = ?, error_message = ?,
  retry_after = ?, updated_at = ? WHERE id = ?`, ErrCodeMigrationDuplicateActive, msg, now, now, id); err != nil {
			return err
		}
	}
	return nil
}

// migrate0011 backfills the library_files columns the duplicate queries need
// (§6.3), checks they exist, and only then builds
// ix_library_files_dedup_group and the group summary; the version is
// recorded by Migrate after this returns, in the same transaction.
func migrate0011(ctx context.Context, tx *sql.Tx) error {
	if err := ensureColumns(ctx, tx, "library_files", LibraryFileColumns); err != nil {
		return err
	}
	have, err := TableColumns(ctx, tx, "library_files")
	if err != nil {
		return err
	}
	var missing []string
	for _, c := range []string{"is_missing", "needs_hash", "hash_algorithm", "content_hash"} {
		if !have[c] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("library_files still lacks %s", strings.Join(missing, ", "))
	}
	if err := lowercase(ctx, tx, "library_files", "hash_algorithm"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE library_files SET content_hash = lower(content_hash) WHERE content_hash <> lower(content_hash)`); err != nil {
		return err
	}
	stmts := []string{
		`CREATE INDEX IF NOT EXISTS ix_library_files_dedup_group ON library_files(hash_algorithm, content_hash, id)
  WHERE is_missing = 0 AND needs_hash = 0 AND hash_algorithm IS NOT NULL AND content_hash IS NOT NULL`,
		`CREATE INDEX IF NOT EXISTS ix_library_files_needs_hash ON library_files(id) WHERE needs_hash = 1 AND is_missing = 0`,
		`CREATE INDEX IF NOT EXISTS ix_library_files_root_seen ON library_files(root, last_seen_scan_id)`,
		ddlDedupGroups,
		`DELETE FROM dedup_groups`,
		dedupBackfill,
		ddlDedupGroupsSort,
	}
	stmts = append(stmts, dedupTriggers...)
	for _, l := range LegalValues {
		if l.Table == "library_files" {
			stmts = append(stmts, legalTriggers(l)...)
		}
	}
	return execAll(stmts...)(ctx, tx)
}

// migrate0012 adds what change detection compares beyond size and mtime:
// library_files.ctime_ns/dev/inode, recorded by each scan, and the source
// stamp of a thumbnail row (thumbnails.source_*), written at admission. All
// are nullable, so existing rows stay valid: a file's identity is filled in
// by the next scan, and a thumbnail without a stamp is rendered again.
func migrate0012(ctx context.Context, tx *sql.Tx) error {
	if err := ensureColumns(ctx, tx, "library_files", LibraryFileColumns); err != nil {
		return err
	}
	return ensureColumns(ctx, tx, "thumbnails", thumbnailColumns)
}

// migrate0013 adds scan_sessions.paths_unreadable, which a scan fills in,
// and an index on the running sessions, which the policy tick looks up to
// close those whose job is no longer running (a scan killed mid-walk).
func migrate0013(ctx context.Context, tx *sql.Tx) error {
	if err := ensureColumns(ctx, tx, "scan_sessions", scanSessionColumns); err != nil {
		return err
	}
	return execAll(`CREATE INDEX IF NOT EXISTS ix_scan_sessions_running ON scan_sessions(job_id) WHERE status = 'running'`)(ctx, tx)
}
