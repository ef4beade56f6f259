package store

// Column is one column a migration guarantees, with the definition used to
// add it to a legacy table that lacks it.
type Column struct{ Name, Def string }

// Every timestamp is INTEGER Unix milliseconds; every enum is TEXT holding
// its lowercase value. Columns are listed once here and used both to create
// fresh tables and to backfill legacy ones.
var (
	jobsColumns = []Column{
		{"kind", "TEXT NOT NULL DEFAULT 'scan'"},
		{"status", "TEXT NOT NULL DEFAULT 'pending'"},
		{"payload", "TEXT NOT NULL DEFAULT '{}'"},
		{"worker_id", "TEXT"},
		{"worker_heartbeat_at", "INTEGER"},
		{"lease_expires_at", "INTEGER"},
		{"processed_items", "INTEGER NOT NULL DEFAULT 0"},
		{"total_items", "INTEGER"},
		{"progress", "REAL NOT NULL DEFAULT 0"},
		{"error_code", "TEXT"},
		{"error_message", "TEXT"},
		{"retry_count", "INTEGER NOT NULL DEFAULT 0"},
		{"retry_after", "INTEGER"},
		{"created_at", "INTEGER NOT NULL DEFAULT 0"},
		{"started_at", "INTEGER"},
		{"finished_at", "INTEGER"},
		{"updated_at", "INTEGER NOT NULL DEFAULT 0"},
	}
	scanSessionColumns = []Column{
		{"job_id", "INTEGER"},
		{"roots", "TEXT NOT NULL DEFAULT '[]'"},
		{"status", "TEXT NOT NULL DEFAULT 'running'"},
		{"files_seen", "INTEGER NOT NULL DEFAULT 0"},
		{"files_new", "INTEGER NOT NULL DEFAULT 0"},
		{"files_changed", "INTEGER NOT NULL DEFAULT 0"},
		{"files_missing", "INTEGER NOT NULL DEFAULT 0"},
		{"files_refused", "INTEGER NOT NULL DEFAULT 0"},
		// Directories below a walked root the scan could not list and files
		// it could not stat (0013); their catalogued files keep their state.
		{"paths_unreadable", "INTEGER NOT NULL DEFAULT 0"},
		{"error_message", "TEXT"},
		{"started_at", "INTEGER NOT NULL DEFAULT 0"},
		{"finished_at", "INTEGER"},
	}
	// LibraryFileColumns are the columns 0011 backfills on legacy schemas
	// before it builds ix_library_files_dedup_group.
	LibraryFileColumns = []Column{
		{"root", "TEXT NOT NULL DEFAULT ''"},
		{"size_bytes", "INTEGER NOT NULL DEFAULT 0"},
		{"mtime_ns", "INTEGER NOT NULL DEFAULT 0"},
		{"is_missing", "INTEGER NOT NULL DEFAULT 0"},
		{"needs_hash", "INTEGER NOT NULL DEFAULT 1"},
		{"hash_algorithm", "TEXT"},
		{"content_hash", "TEXT"},
		{"hashed_at", "INTEGER"},
		{"last_seen_scan_id", "INTEGER"},
		{"created_at", "INTEGER NOT NULL DEFAULT 0"},
		{"updated_at", "INTEGER NOT NULL DEFAULT 0"},
		// What else the scan saw of the file (0012). A rewrite that keeps the
		// size and restores the mtime still changes the ctime, which utimes
		// cannot set, and a file replaced by another has a new inode. NULL:
		// not recorded yet (a row from before 0012), filled in by the next
		// scan without counting as a change.
		{"ctime_ns", "INTEGER"},
		{"dev", "INTEGER"},
		{"inode", "INTEGER"},
	}
	thumbnailColumns = []Column{
		{"file_id", "INTEGER NOT NULL DEFAULT 0"},
		{"group_key", "TEXT"},
		{"source_path", "TEXT NOT NULL DEFAULT ''"},
		{"output_path", "TEXT NOT NULL DEFAULT ''"},
		{"status", "TEXT NOT NULL DEFAULT 'pending'"},
		{"media_type", "TEXT NOT NULL DEFAULT 'image'"},
		{"format", "TEXT NOT NULL DEFAULT 'jpeg'"},
		{"max_size", "INTEGER NOT NULL DEFAULT 320"},
		{"width", "INTEGER"},
		{"height", "INTEGER"},
		{"bytes_size", "INTEGER"},
		{"worker_id", "TEXT"},
		{"worker_heartbeat_at", "INTEGER"},
		{"lease_expires_at", "INTEGER"},
		{"error_code", "TEXT"},
		{"error_message", "TEXT"},
		{"error_count", "INTEGER NOT NULL DEFAULT 0"},
		{"retry_after", "INTEGER"},
		{"created_at", "INTEGER NOT NULL DEFAULT 0"},
		{"started_at", "INTEGER"},
		{"finished_at", "INTEGER"},
		{"updated_at", "INTEGER NOT NULL DEFAULT 0"},
		// The catalog's record of the source when the row was admitted
		// (0012; policy-only, outside the §7.2 whitelists): a row whose
		// source no longer matches is rendered again. NULL on rows from
		// before 0012, which are therefore rendered again once.
		{"source_size_bytes", "INTEGER"},
		{"source_mtime_ns", "INTEGER"},
		{"source_ctime_ns", "INTEGER"},
	}
	cleanupColumns = []Column{
		{"group_key", "TEXT NOT NULL DEFAULT ''"},
		{"status", "TEXT NOT NULL DEFAULT 'pending'"},
		{"execute_after", "INTEGER NOT NULL DEFAULT 0"},
		{"worker_id", "TEXT"},
		{"worker_heartbeat_at", "INTEGER"},
		{"lease_expires_at", "INTEGER"},
		{"error_code", "TEXT"},
		{"error_message", "TEXT"},
		{"created_at", "INTEGER NOT NULL DEFAULT 0"},
		{"finished_at", "INTEGER"},
		{"updated_at", "INTEGER NOT NULL DEFAULT 0"},
	}
	walColumns = []Column{
		{"requested_mode", "TEXT NOT NULL DEFAULT 'passive'"},
		{"status", "TEXT NOT NULL DEFAULT 'pending'"},
		{"execute_after", "INTEGER NOT NULL DEFAULT 0"},
		{"worker_id", "TEXT"},
		{"worker_heartbeat_at", "INTEGER"},
		{"lease_expires_at", "INTEGER"},
		{"retry_count", "INTEGER NOT NULL DEFAULT 0"},
		{"retry_after", "INTEGER"},
		{"checkpoint_busy", "INTEGER"},
		{"checkpoint_log_frames", "INTEGER"},
		{"checkpointed_frames", "INTEGER"},
		{"error_code", "TEXT"},
		{"error_message", "TEXT"},
		{"created_at", "INTEGER NOT NULL DEFAULT 0"},
		{"started_at", "INTEGER"},
		{"finished_at", "INTEGER"},
		{"updated_at", "INTEGER NOT NULL DEFAULT 0"},
	}
)

func createTable(name, key string, cols []Column, extra ...string) string {
	s := "CREATE TABLE IF NOT EXISTS " + name + " (\n  " + key
	for _, c := range cols {
		s += ",\n  " + c.Name + " " + c.Def
	}
	for _, e := range extra {
		s += ",\n  " + e
	}
	return s + "\n)"
}

var (
	ddlJobs         = createTable("jobs", "id INTEGER PRIMARY KEY AUTOINCREMENT", jobsColumns)
	ddlScanSessions = createTable("scan_sessions", "id INTEGER PRIMARY KEY AUTOINCREMENT", scanSessionColumns)
	ddlLibraryFiles = createTable("library_files", "id INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT NOT NULL UNIQUE", LibraryFileColumns)
	ddlThumbnails   = createTable("thumbnails", "id INTEGER PRIMARY KEY AUTOINCREMENT", thumbnailColumns)
	ddlCleanup      = createTable("thumbnail_cleanup_jobs", "id INTEGER PRIMARY KEY AUTOINCREMENT", cleanupColumns)
	ddlWAL          = createTable("wal_maintenance_jobs", "id INTEGER PRIMARY KEY AUTOINCREMENT", walColumns)
	ddlIORate       = `CREATE TABLE IF NOT EXISTS io_rate_limits (
  bucket_key TEXT PRIMARY KEY,
  next_available_at_ms INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL DEFAULT 0
)`
	ddlDeleteDecisions = `CREATE TABLE IF NOT EXISTS delete_decisions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id INTEGER NOT NULL,
  group_key TEXT NOT NULL,
  file_id INTEGER NOT NULL,
  path TEXT NOT NULL,
  decision TEXT NOT NULL CHECK (decision IN ('keep','trashed','removed','refused')),
  reason TEXT NOT NULL,
  trash_path TEXT,
  decided_at INTEGER NOT NULL
)`
)

// The duplicate-group summary keeps one row per (hash_algorithm,
// content_hash) of the §6.2 source set, maintained by triggers on
// library_files, so a group page is one index seek on sort_key rather than a
// GROUP BY over every file. sort_key encodes the §6.2 order
// (file_count DESC, total_size_bytes DESC, hash_algorithm ASC,
// content_hash_hex ASC) as one ascending string; see SortKey.
const (
	ddlDedupGroups = `CREATE TABLE IF NOT EXISTS dedup_groups (
  hash_algorithm TEXT NOT NULL,
  content_hash TEXT NOT NULL,
  file_count INTEGER NOT NULL,
  total_size_bytes INTEGER NOT NULL,
  sort_key TEXT NOT NULL,
  PRIMARY KEY (hash_algorithm, content_hash)
) WITHOUT ROWID`
	ddlDedupGroupsSort = `CREATE INDEX IF NOT EXISTS ix_dedup_groups_sort ON dedup_groups(sort_key) WHERE file_count > 1`

	// sortKeySQL must produce exactly what SortKey produces in Go.
	sortKeySQL = `printf('%019d%019d', 999999999999999999 - file_count, 999999999999999999 - total_size_bytes) || hash_algorithm || ':' || content_hash`

	inSourceOld = `OLD.is_missing = 0 AND OLD.needs_hash = 0 AND OLD.hash_algorithm IS NOT NULL AND OLD.content_hash IS NOT NULL`
	inSourceNew = `NEW.is_missing = 0 AND NEW.needs_hash = 0 AND NEW.hash_algorithm IS NOT NULL AND NEW.content_hash IS NOT NULL`
)

func dedupAdd(side string) string {
	return `INSERT INTO dedup_groups(hash_algorithm, content_hash, file_count, total_size_bytes, sort_key)
    VALUES (` + side + `.hash_algorithm, ` + side + `.content_hash, 1, ` + side + `.size_bytes, '')
    ON CONFLICT(hash_algorithm, content_hash) DO UPDATE SET
      file_count = file_count + 1, total_size_bytes = total_size_bytes + excluded.total_size_bytes;
  UPDATE dedup_groups SET sort_key = ` + sortKeySQL + `
    WHERE hash_algorithm = ` + side + `.hash_algorithm AND content_hash = ` + side + `.content_hash;`
}

func dedupSub(side string) string {
	return `UPDATE dedup_groups SET file_count = file_count - 1, total_size_bytes = total_size_bytes - ` + side + `.size_bytes
    WHERE hash_algorithm = ` + side + `.hash_algorithm AND content_hash = ` + side + `.content_hash;
  DELETE FROM dedup_groups WHERE hash_algorithm = ` + side + `.hash_algorithm AND content_hash = ` + side + `.content_hash AND file_count <= 0;
  UPDATE dedup_groups SET sort_key = ` + sortKeySQL + `
    WHERE hash_algorithm = ` + side + `.hash_algorithm AND content_hash = ` + side + `.content_hash;`
}

var dedupTriggers = []string{
	`CREATE TRIGGER IF NOT EXISTS trg_dedup_groups_ins AFTER INSERT ON library_files WHEN ` + inSourceNew + ` BEGIN ` + dedupAdd("NEW") + ` END`,
	`CREATE TRIGGER IF NOT EXISTS trg_dedup_groups_del AFTER DELETE ON library_files WHEN ` + inSourceOld + ` BEGIN ` + dedupSub("OLD") + ` END`,
	`CREATE TRIGGER IF NOT EXISTS trg_dedup_groups_upd_old AFTER UPDATE OF is_missing, needs_hash, hash_algorithm, content_hash, size_bytes ON library_files WHEN ` + inSourceOld + ` BEGIN ` + dedupSub("OLD") + ` END`,
	`CREATE TRIGGER IF NOT EXISTS trg_dedup_groups_upd_new AFTER UPDATE OF is_missing, needs_hash, hash_algorithm, content_hash, size_bytes ON library_files WHEN ` + inSourceNew + ` BEGIN ` + dedupAdd("NEW") + ` END`,
}

const dedupBackfill = `INSERT INTO dedup_groups(hash_algorithm, content_hash, file_count, total_size_bytes, sort_key)
SELECT hash_algorithm, content_hash, COUNT(*), SUM(size_bytes), ''
FROM library_files
WHERE is_missing = 0 AND needs_hash = 0 AND hash_algorithm IS NOT NULL AND content_hash IS NOT NULL
GROUP BY hash_algorithm, content_hash;
UPDATE dedup_groups SET sort_key = ` + sortKeySQL
