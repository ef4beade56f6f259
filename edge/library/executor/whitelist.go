package executor

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"

	"github.com/vesta-cx/euterpe/edge/library/store"
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

func mustUpdate(table, path string, sets []Set, where string) Update {
	u, err := BuildUpdate(table, path, sets, where)
	if err != nil {
		panic(err)
	}
	registry = append(registry, u)
	return u
}

// Statements returns every UPDATE the executor issues.
func Statements() []Update { return append([]Update(nil), registry...) }

// exec runs u as one write of its path (marked for the guard triggers when
// the store marks paths).
func (x *Executor) exec(ctx context.Context, u Update, args ...any) (sql.Result, error) {
	var res sql.Result
	err := x.Store.OnPath(ctx, store.WritePath{Table: u.Table, Path: u.Path}, func(q store.Querier) error {
		var err error
		res, err = q.ExecContext(ctx, u.SQL, args...)
		return err
	})
	return res, err
}

// queryRow runs u (an UPDATE … RETURNING) as one write of its path and
// hands the row to scan inside the write.
func (x *Executor) queryRow(ctx context.Context, u Update, scan func(*sql.Row) error, args ...any) error {
	return x.Store.OnPath(ctx, store.WritePath{Table: u.Table, Path: u.Path}, func(q store.Querier) error {
		return scan(q.QueryRowContext(ctx, u.SQL, args...))
	})
}

// GuardedPaths is every write path the guard triggers know: the executor's
// §7 Whitelists plus the catalog's store.CatalogWrites.
func GuardedPaths() map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for _, src := range []map[string]map[string][]string{Whitelists, store.CatalogWrites} {
		for table, paths := range src {
			if out[table] == nil {
				out[table] = map[string][]string{}
			}
			for p, cols := range paths {
				out[table][p] = cols
			}
		}
	}
	return out
}

// Writable is the union of the columns any guarded path may write in table.
func Writable(table string) []string {
	seen := map[string]bool{}
	for _, cols := range GuardedPaths()[table] {
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

// changed renders "OLD.c IS NOT NEW.c OR …" for the columns of all not in
// allowed ("0" when none).
func changed(all []string, allowed []string) string {
	ok := map[string]bool{}
	for _, c := range allowed {
		ok[c] = true
	}
	var conds []string
	for _, c := range all {
		if !ok[c] {
			conds = append(conds, fmt.Sprintf("OLD.%[1]s IS NOT NEW.%[1]s", c))
		}
	}
	if len(conds) == 0 {
		return "0"
	}
	return "(" + strings.Join(conds, " OR ") + ")"
}

// GuardTriggers returns the statements (store.PathMarkDDL first) that
// install, for table with columns all, triggers aborting a forbidden UPDATE:
//
//   - a marked UPDATE (executor_path holds a row for table) may change only
//     the columns of that one path; a path the table does not have aborts;
//   - an unmarked UPDATE (test fixtures, policy writes) may change only the
//     union of the table's paths.
//
// Tests install them together with Store.MarkPaths on databases whose
// guarded tables only the executor, the catalog and the policy side update.
func GuardTriggers(table string, all []string) []string {
	paths := GuardedPaths()[table]
	mark := fmt.Sprintf("(SELECT path FROM %s WHERE tbl = '%s' LIMIT 1)", store.PathMarkTable, table)
	out := []string{store.PathMarkDDL}
	trigger := func(name, when, msg string) {
		out = append(out, fmt.Sprintf("CREATE TRIGGER IF NOT EXISTS trg_guard_%s_%s BEFORE UPDATE ON %s WHEN %s\n"+
			"BEGIN SELECT RAISE(ABORT, '%s'); END", table, name, table, when, msg))
	}
	names := make([]string, 0, len(paths))
	for p := range paths {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		trigger("path_"+p, mark+" = '"+p+"' AND "+changed(all, paths[p]),
			"executor whitelist violation on "+table+" ("+p+" path)")
	}
	quoted := make([]string, len(names))
	for i, p := range names {
		quoted[i] = "'" + p + "'"
	}
	known := "0"
	if len(quoted) > 0 {
		known = mark + " IN (" + strings.Join(quoted, ",") + ")"
	}
	trigger("unknown_path", mark+" IS NOT NULL AND NOT "+known,
		"executor whitelist violation on "+table+" (unknown path)")
	trigger("unmarked", mark+" IS NULL AND "+changed(all, Writable(table)),
		"executor whitelist violation on "+table)
	return out
}
