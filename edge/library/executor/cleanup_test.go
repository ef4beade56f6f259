package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestCleanupRemovesThumbnailsAdmittedBeforeHash: a thumbnail requested
// before its file was hashed has no group_key, and keeps none once the
// file is hashed. The cleanup scheduled by a delete in the file's group
// must still remove its row and cache file (the file is gone), wait for it
// while it is pending or running as for the group's own rows, and leave
// the rows of files in other groups or in none alone.
func TestCleanupRemovesThumbnailsAdmittedBeforeHash(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	dup, other := filepath.Join(e.outside, "dup.jpg"), filepath.Join(e.outside, "other.jpg")
	writeJPEG(t, dup, 40, 30)
	writeJPEG(t, other, 30, 40)
	copyFile := func(from, name string) string {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		return e.write(name, string(data))
	}
	kept := copyFile(dup, "kept.jpg")       // kept; thumbnail requested once hashed
	deleted := copyFile(dup, "deleted.jpg") // deleted; thumbnail rendered before the hash
	late := copyFile(dup, "late.jpg")       // kept; thumbnail requested before the hash, rendered after the delete
	unique := copyFile(other, "unique.jpg") // another content; thumbnail before the hash

	if _, err := e.p.EnqueueScan(ctx); err != nil {
		t.Fatal(err)
	}
	e.runJob()
	render := func(path string) policy.Thumb {
		t.Helper()
		e.admit(path, store.FormatJPEG, 16)
		if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
			t.Fatalf("render %s: did=%v err=%v", path, did, err)
		}
		return e.admit(path, store.FormatJPEG, 16)
	}
	thumbs := map[string]policy.Thumb{deleted: render(deleted), unique: render(unique)}
	thumbs[late] = e.admit(late, store.FormatJPEG, 16) // stays pending
	for p, th := range thumbs {
		if th.GroupKey != nil {
			t.Fatalf("%s admitted before the hash with group %s", p, *th.GroupKey)
		}
	}
	if _, err := e.p.EnqueueHash(ctx); err != nil {
		t.Fatal(err)
	}
	e.runJob()
	// A file found by a scan after the hash pass: no digest yet.
	unhashed := copyFile(other, "unhashed.jpg")
	if _, err := e.p.EnqueueScan(ctx); err != nil {
		t.Fatal(err)
	}
	e.runJob()
	thumbs[unhashed] = e.admit(unhashed, store.FormatJPEG, 16) // pending too

	fk, fd := e.file(kept), e.file(deleted)
	group := groupOf(t, fk)
	if _, err := e.p.RequestDelete(ctx, group, policy.DeleteRequest{
		KeepFileIDs: []int64{fk.ID, e.file(late).ID}, DeleteFileIDs: []int64{fd.ID}}); err != nil {
		t.Fatal(err)
	}
	if j := e.runJob(); j.Status != store.StatusCompleted {
		t.Fatalf("delete %s: %s", j.Status, deref(j.ErrorMessage))
	}
	if _, err := os.Stat(deleted); !os.IsNotExist(err) {
		t.Fatalf("deleted copy still in place: %v", err)
	}
	if did, err := e.x.RunCleanupOnce(ctx); did || err != nil {
		t.Fatalf("cleanup claimed while a thumbnail of a file in its group was pending: did=%v err=%v", did, err)
	}
	for _, p := range []string{late, unhashed} {
		if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
			t.Fatalf("render %s: did=%v err=%v", p, did, err)
		}
	}
	thumbs[late] = e.admit(late, store.FormatJPEG, 16)
	thumbs[unhashed] = e.admit(unhashed, store.FormatJPEG, 16)
	thumbs[kept] = render(kept)
	if thumbs[kept].GroupKey == nil || *thumbs[kept].GroupKey != group.String() {
		t.Fatalf("thumbnail admitted after the hash has group %v, want %s", thumbs[kept].GroupKey, group)
	}
	if did, err := e.x.RunCleanupOnce(ctx); !did || err != nil {
		t.Fatalf("cleanup did=%v err=%v", did, err)
	}
	var status string
	e.st.DB.QueryRow(`SELECT status FROM thumbnail_cleanup_jobs`).Scan(&status)
	if status != store.StatusCompleted {
		t.Fatalf("cleanup %s", status)
	}

	for _, c := range []struct {
		path string
		gone bool
	}{
		{deleted, true},
		{late, true},
		{kept, true},
		{unique, false},
		{unhashed, false},
	} {
		th := thumbs[c.path]
		var rows int
		e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE id = ?`, th.ID).Scan(&rows)
		_, err := os.Stat(th.OutputPath)
		cacheGone := os.IsNotExist(err)
		if th.Status == store.StatusFailed {
			cacheGone = c.gone // a failed render has no cache file
		}
		if (rows == 0) != c.gone || cacheGone != c.gone {
			t.Errorf("%s (%s): row left=%v cache file gone=%v, want removed=%v", filepath.Base(c.path), th.Status, rows == 1, cacheGone, c.gone)
		}
	}
	for _, p := range []string{kept, late, unique, unhashed} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("original %s touched: %v", p, err)
		}
	}
}

// TestCleanupOfUngroupedRowsStaysInThumbs: the rows reached through their
// file rather than their group_key are held to the same rule as the
// group's own: a path outside the thumbnails directory, or a symlink in it,
// fails the cleanup and the original is untouched.
func TestCleanupOfUngroupedRowsStaysInThumbs(t *testing.T) {
	cases := []struct {
		name       string
		outputPath func(e *env, original string) string
		status     string
	}{
		{"path of an original", func(e *env, original string) string { return original }, store.StatusFailed},
		{"symlink in the cache to an original", func(e *env, original string) string {
			link := filepath.Join(e.x.Thumbs.Path(), "99_16.jpg")
			if err := os.Symlink(original, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, store.StatusFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			ctx := context.Background()
			a := filepath.Join(e.root, "a.jpg")
			writeJPEG(t, a, 30, 30)
			data, _ := os.ReadFile(a)
			b := e.write("b.jpg", string(data))
			e.scanAndHash()
			fb := e.file(b)
			out := c.outputPath(e, a)
			if _, err := e.st.DB.Exec(`INSERT INTO thumbnails(file_id, group_key, source_path, output_path, status) VALUES (?, NULL, ?, ?, 'ready')`,
				fb.ID, b, out); err != nil {
				t.Fatal(err)
			}
			group := groupOf(t, fb).String()
			e.p.ScheduleCleanup(ctx, group, 0)
			if did, _ := e.x.RunCleanupOnce(ctx); !did {
				t.Fatal("due cleanup not claimed")
			}
			var status string
			e.st.DB.QueryRow(`SELECT status FROM thumbnail_cleanup_jobs`).Scan(&status)
			if status != c.status {
				t.Fatalf("cleanup %s, want %s", status, c.status)
			}
			if got, err := os.ReadFile(a); err != nil || string(got) != string(data) {
				t.Fatalf("original changed: %v", err)
			}
		})
	}
}

// TestCleanupDeletesOnlyTerminalRows: the group's rows admitted after the
// cleanup was claimed (pending, or running with its output already renamed
// into place) are neither deleted nor have their cache files removed; only
// ready and failed rows go (§4.4, terminal-state safe). The admissions are
// made by a trigger on the claim itself, so they land between the claim and
// the work.
func TestCleanupDeletesOnlyTerminalRows(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	group := "blake3:" + strings.Repeat("ab", 32)
	out := func(name string) string {
		p := filepath.Join(e.x.Thumbs.Path(), name)
		if err := os.WriteFile(p, []byte("cache"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rows := map[string]struct {
		status, path string
		stays        bool
	}{
		"ready":   {store.StatusReady, out("1_16.jpg"), false},
		"failed":  {store.StatusFailed, out("2_16.jpg"), false},
		"pending": {store.StatusPending, out("3_16.jpg"), true},
		"running": {store.StatusRunning, out("4_16.jpg"), true},
	}
	for _, name := range []string{"ready", "failed"} {
		r := rows[name]
		insertRow(t, e, "thumbnails", map[string]any{"file_id": 1, "group_key": group, "status": r.status, "output_path": r.path})
	}
	mustExecT(t, e, `CREATE TRIGGER admit_after_claim AFTER UPDATE OF status ON thumbnail_cleanup_jobs WHEN NEW.status = 'running'
BEGIN
  INSERT INTO thumbnails(file_id, group_key, status, output_path) VALUES (3, NEW.group_key, 'pending', '`+rows["pending"].path+`');
  INSERT INTO thumbnails(file_id, group_key, status, output_path, worker_id, lease_expires_at)
    VALUES (4, NEW.group_key, 'running', '`+rows["running"].path+`', 'w#1', 9000000000000);
END`)
	id := insertRow(t, e, "thumbnail_cleanup_jobs", map[string]any{"group_key": group, "status": "pending", "execute_after": 0})
	if did, err := e.x.RunCleanupOnce(ctx); !did || err != nil {
		t.Fatalf("cleanup did=%v err=%v", did, err)
	}
	var status string
	e.st.DB.QueryRow(`SELECT status FROM thumbnail_cleanup_jobs WHERE id = ?`, id).Scan(&status)
	if status != store.StatusCompleted {
		t.Fatalf("cleanup %s", status)
	}
	for name, r := range rows {
		var n int
		e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE output_path = ? AND status = ?`, r.path, r.status).Scan(&n)
		_, err := os.Stat(r.path)
		if r.stays && (n != 1 || err != nil) {
			t.Errorf("%s row: %d rows left, cache file %v; want it untouched", name, n, err)
		}
		if !r.stays && (n != 0 || !os.IsNotExist(err)) {
			t.Errorf("%s row: %d rows left, cache file %v; want both gone", name, n, err)
		}
	}
}

// TestCleanupLeavesTheFileOfAReplacedRow: a ready row replaced between the
// cleanup's read and its delete (its file re-requested: a new row admitted
// for the same cache path and rendered) owns that path now; the cleanup
// deletes neither the new row nor its freshly written file.
func TestCleanupLeavesTheFileOfAReplacedRow(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	group := "blake3:" + strings.Repeat("cd", 32)
	path := filepath.Join(e.x.Thumbs.Path(), "1_16.jpg")
	if err := os.WriteFile(path, []byte("old picture"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := insertRow(t, e, "thumbnails", map[string]any{"file_id": 1, "group_key": group, "status": store.StatusReady, "output_path": path})
	executor.SetBeforeCleanRow(e.x, func(id int64, _ string) {
		if id != old {
			return
		}
		mustExecT(t, e, `DELETE FROM thumbnails WHERE id = ?`, old)
		insertRow(t, e, "thumbnails", map[string]any{"file_id": 1, "status": store.StatusReady, "output_path": path})
		if err := os.WriteFile(path, []byte("new picture"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	insertRow(t, e, "thumbnail_cleanup_jobs", map[string]any{"group_key": group, "status": "pending", "execute_after": 0})
	if did, err := e.x.RunCleanupOnce(ctx); !did || err != nil {
		t.Fatalf("cleanup did=%v err=%v", did, err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "new picture" {
		t.Fatalf("the new row's cache file: %q %v; want it untouched", b, err)
	}
	var n int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE output_path = ? AND status = 'ready'`, path).Scan(&n)
	if n != 1 {
		t.Fatalf("%d ready rows for the path, want the new one", n)
	}
}
