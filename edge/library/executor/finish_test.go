package executor_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestFinishClearsLease checks every finish path of the four leased tables
// (§4.2–§4.5): the row reaches the protocol's status, lease_expires_at is
// cleared, finished_at is stamped, a failure carries its error metadata and
// a success none. The guard triggers hold each write to its §7 path.
func TestFinishClearsLease(t *testing.T) {
	cases := []struct {
		name  string
		table string
		// setup inserts the row to claim and returns its id; run claims
		// and runs it.
		setup    func(t *testing.T, e *env) int64
		run      func(e *env, ctx context.Context) (bool, error)
		status   string
		wantCode string // "" = error_code NULL
	}{
		{"jobs completed", "jobs",
			func(t *testing.T, e *env) int64 {
				return insertRow(t, e, "jobs", map[string]any{"kind": "scan", "status": "pending"})
			},
			(*env).runJobOnce, store.StatusCompleted, ""},
		{"jobs failed", "jobs",
			func(t *testing.T, e *env) int64 {
				return insertRow(t, e, "jobs", map[string]any{"kind": "delete", "status": "pending", "payload": "not json"})
			},
			(*env).runJobOnce, store.StatusFailed, executor.CodeBadPayload},
		{"thumbnails ready", "thumbnails",
			func(t *testing.T, e *env) int64 {
				src := filepath.Join(e.root, "a.jpg")
				writeJPEG(t, src, 40, 30)
				return insertRow(t, e, "thumbnails", map[string]any{"file_id": 1, "source_path": src,
					"output_path": filepath.Join(e.x.Thumbs.Path(), "1_16.jpg"), "status": "pending",
					"media_type": "image", "format": "jpeg", "max_size": 16})
			},
			(*env).runThumbnailOnce, store.StatusReady, ""},
		{"thumbnails failed", "thumbnails",
			func(t *testing.T, e *env) int64 {
				return insertRow(t, e, "thumbnails", map[string]any{"file_id": 1, "source_path": filepath.Join(e.root, "gone.jpg"),
					"output_path": filepath.Join(e.x.Thumbs.Path(), "1_16.jpg"), "status": "pending",
					"media_type": "image", "format": "jpeg", "max_size": 16})
			},
			(*env).runThumbnailOnce, store.StatusFailed, executor.CodeSourceMissing},
		{"cleanup completed", "thumbnail_cleanup_jobs",
			func(t *testing.T, e *env) int64 {
				return insertRow(t, e, "thumbnail_cleanup_jobs", map[string]any{"group_key": "blake3:x", "status": "pending", "execute_after": 0})
			},
			(*env).runCleanupOnce, store.StatusCompleted, ""},
		{"cleanup failed", "thumbnail_cleanup_jobs",
			func(t *testing.T, e *env) int64 {
				// a row of the group pointing outside the cache: refused
				insertRow(t, e, "thumbnails", map[string]any{"file_id": 1, "group_key": "blake3:x", "status": "ready",
					"output_path": filepath.Join(e.outside, "1_16.jpg")})
				return insertRow(t, e, "thumbnail_cleanup_jobs", map[string]any{"group_key": "blake3:x", "status": "pending", "execute_after": 0})
			},
			(*env).runCleanupOnce, store.StatusFailed, executor.CodeCleanupFailed},
		{"wal completed", "wal_maintenance_jobs",
			func(t *testing.T, e *env) int64 {
				return insertRow(t, e, "wal_maintenance_jobs", map[string]any{"requested_mode": "passive", "status": "pending", "execute_after": 0})
			},
			(*env).runWALOnce, store.StatusCompleted, ""},
		{"wal failed on an execution error", "wal_maintenance_jobs",
			func(t *testing.T, e *env) int64 {
				// A mode PRAGMA wal_checkpoint does not take, from a file
				// written before the legal-value triggers: the checkpoint
				// cannot run, which fails the row rather than retrying it.
				mustExecT(t, e, `DROP TRIGGER trg_legal_wal_maintenance_jobs_requested_mode_ins`)
				return insertRow(t, e, "wal_maintenance_jobs", map[string]any{"requested_mode": "full", "status": "pending", "execute_after": 0})
			},
			(*env).runWALOnce, store.StatusFailed, executor.CodeBadMode},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			ctx := context.Background()
			id := c.setup(t, e)
			if did, err := c.run(e, ctx); !did || err != nil {
				t.Fatalf("run: did=%v err=%v", did, err)
			}
			var status string
			var lease, finished *int64
			var code, msg *string
			if err := e.st.DB.QueryRow(`SELECT status, lease_expires_at, finished_at, error_code, error_message FROM `+c.table+` WHERE id = ?`, id).
				Scan(&status, &lease, &finished, &code, &msg); err != nil {
				t.Fatal(err)
			}
			if status != c.status {
				t.Fatalf("status %q (%s: %s), want %q", status, deref(code), deref(msg), c.status)
			}
			if lease != nil {
				t.Errorf("lease_expires_at = %d after %s, want NULL", *lease, status)
			}
			if finished == nil {
				t.Errorf("finished_at not stamped")
			}
			if deref(code) != c.wantCode {
				t.Errorf("error_code %q, want %q", deref(code), c.wantCode)
			}
			if (c.wantCode != "") != (msg != nil) {
				t.Errorf("error_message %v with error_code %q", deref(msg), c.wantCode)
			}
		})
	}
}

func (e *env) runJobOnce(ctx context.Context) (bool, error)       { return e.x.RunJobOnce(ctx) }
func (e *env) runThumbnailOnce(ctx context.Context) (bool, error) { return e.x.RunThumbnailOnce(ctx) }
func (e *env) runCleanupOnce(ctx context.Context) (bool, error)   { return e.x.RunCleanupOnce(ctx) }
func (e *env) runWALOnce(ctx context.Context) (bool, error)       { return e.x.RunWALOnce(ctx) }

func mustExecT(t *testing.T, e *env, q string, args ...any) {
	t.Helper()
	if _, err := e.st.DB.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
