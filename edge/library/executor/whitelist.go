package executor

import (
	"fmt"
	"sort"
	"strings"
)

// Whitelists is protocol §7 as data: table → write path → the columns the
// executor may write on that path. Recovery paths write only columns that
// the protocol lists for the table's other paths (lease owner fields and
// error metadata).
var Whitelists = map[string]map[string][]string{
	"jobs": {
		"claim":     {"status", "worker_id", "worker_heartbeat_at", "lease_expires_at", "started_at", "updated_at"},
		"heartbeat": {"processed_items", "progress", "worker_heartbeat_at", "lease_expires_at", "updated_at"},
		"finish":    {"status", "progress", "error_code", "error_message", "finished_at", "worker_heartbeat_at", "lease_expires_at", "updated_at"},
		// §4.2 claim-path recovery: stale running -> retryable, lease owner
		// fields cleared, deterministic recovery metadata.
		"recover": {"status", "worker_id", "worker_heartbeat_at", "lease_expires_at", "error_code", "error_message", "finished_at", "updated_at"},
	},
	"thumbnails": {
		"claim":          {"status", "worker_id", "worker_heartbeat_at", "lease_expires_at", "started_at", "updated_at"},
		"heartbeat":      {"worker_heartbeat_at", "lease_expires_at", "updated_at"},
		"finish_success": {"status", "width", "height", "bytes_size", "error_code", "error_message", "error_count", "retry_after", "finished_at", "worker_heartbeat_at", "lease_expires_at", "updated_at"},
		"finish_failure": {"status", "error_code", "error_message", "error_count", "retry_after", "finished_at", "worker_heartbeat_at", "lease_expires_at", "updated_at"},
		// §4.3: stale running -> pending, lease owner fields cleared.
		"requeue_stale": {"status", "worker_id", "worker_heartbeat_at", "lease_expires_at", "updated_at"},
	},
	"thumbnail_cleanup_jobs": {
		"claim": {"status", "worker_id", "worker_heartbeat_at", "lease_expires_at", "finished_at", "updated_at"},
		// Lease renewal writes a subset of the claim path's columns.
		"heartbeat":     {"worker_heartbeat_at", "lease_expires_at", "updated_at"},
		"finish":        {"status", "error_code", "error_message", "finished_at", "worker_heartbeat_at", "lease_expires_at", "updated_at"},
		"requeue_stale": {"status", "worker_id", "worker_heartbeat_at", "lease_expires_at", "updated_at"},
	},
	"io_rate_limits": {
		"reserve": {"next_available_at_ms", "updated_at"},
	},
	"wal_maintenance_jobs": {
		"claim":     {"status", "worker_id", "worker_heartbeat_at", "lease_expires_at", "started_at", "updated_at", "finished_at"},
		"heartbeat": {"worker_heartbeat_at", "lease_expires_at", "updated_at"},
		"recover":   {"status", "retry_count", "retry_after", "worker_id", "worker_heartbeat_at", "lease_expires_at", "error_code", "error_message", "finished_at", "updated_at"},
		"success":   {"status", "checkpoint_busy", "checkpoint_log_frames", "checkpointed_frames", "error_code", "error_message", "finished_at", "worker_heartbeat_at", "lease_expires_at", "updated_at"},
		"retry":     {"status", "retry_count", "retry_after", "checkpoint_busy", "checkpoint_log_frames", "checkpointed_frames", "error_code", "error_message", "finished_at", "worker_heartbeat_at", "lease_expires_at", "updated_at"},
		"failure":   {"status", "error_code", "error_message", "finished_at", "worker_heartbeat_at", "lease_expires_at", "updated_at"},
	},
}

// Set is one column assignment of an UPDATE: Col = Expr (Expr is SQL,
// usually "?").
type Set struct{ Col, Expr string }

// Update is an executor UPDATE statement whose SET list has been checked
// against Whitelists[Table][Path].
type Update struct {
	Table, Path string
	Cols        []string
	SQL         string
}

// registry holds every statement built, so a test can re-check them all.
var registry []Update

// BuildUpdate renders "UPDATE table SET ... WHERE where [RETURNING ...]",
// failing when a column is not whitelisted for the path.
func BuildUpdate(table, path string, sets []Set, where string) (Update, error) {
	allowed := map[string]bool{}
	paths, ok := Whitelists[table]
	if !ok {
		return Update{}, fmt.Errorf("executor may not update table %s", table)
	}
	cols, ok := paths[path]
	if !ok {
		return Update{}, fmt.Errorf("table %s has no executor path %q", table, path)
	}
	for _, c := range cols {
		allowed[c] = true
	}
	parts := make([]string, len(sets))
	names := make([]string, len(sets))
	for i, s := range sets {
		if !allowed[s.Col] {
			return Update{}, fmt.Errorf("column %s.%s is not whitelisted for the %s path", table, s.Col, path)
		}
		parts[i] = s.Col + " = " + s.Expr
		names[i] = s.Col
	}
	return Update{Table: table, Path: path, Cols: names,
		SQL: "UPDATE " + table + " SET " + strings.Join(parts, ", ") + " WHERE " + where}, nil
}

func mustUpdate(table, path string, sets []Set, where string) string {
	u, err := BuildUpdate(table, path, sets, where)
	if err != nil {
		panic(err)
	}
	registry = append(registry, u)
	return u.SQL
}

// Statements returns every UPDATE the executor issues.
func Statements() []Update { return append([]Update(nil), registry...) }

// Writable is the union of the columns the executor may write in table.
func Writable(table string) []string {
	seen := map[string]bool{}
	for _, cols := range Whitelists[table] {
		for _, c := range cols {
			seen[c] = true
		}
	}
	out := make([]string, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// GuardTriggers returns, for table with columns all, a trigger that aborts
// any UPDATE changing a column the executor may not write. Tests install it
// on databases only the executor updates.
func GuardTriggers(table string, all []string) string {
	w := map[string]bool{}
	for _, c := range Writable(table) {
		w[c] = true
	}
	var conds []string
	for _, c := range all {
		if !w[c] {
			conds = append(conds, fmt.Sprintf("OLD.%[1]s IS NOT NEW.%[1]s", c))
		}
	}
	if len(conds) == 0 {
		conds = []string{"0"}
	}
	return fmt.Sprintf(`CREATE TRIGGER IF NOT EXISTS trg_guard_%[1]s BEFORE UPDATE ON %[1]s WHEN %[2]s
BEGIN SELECT RAISE(ABORT, 'executor whitelist violation on %[1]s'); END`, table, strings.Join(conds, " OR "))
}
