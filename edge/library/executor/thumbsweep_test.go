package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// rendered admits and renders the thumbnail of path at format/size and
// returns its row id and cache path.
func (e *env) rendered(path, format string, size int) (int64, string) {
	e.t.Helper()
	e.admit(path, format, size)
	if did, err := e.x.RunThumbnailOnce(context.Background()); !did || err != nil {
		e.t.Fatalf("render %s: did=%v err=%v", path, did, err)
	}
	th := e.admit(path, format, size)
	if th.Status != store.StatusReady {
		e.t.Fatalf("thumbnail of %s %s, want ready", path, th.Status)
	}
	return th.ID, th.OutputPath
}

func (e *env) rowExists(id int64) bool {
	var n int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE id = ?`, id).Scan(&n)
	return n == 1
}

func (e *env) rescan() {
	e.t.Helper()
	if _, err := e.p.EnqueueScan(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	if j := e.runJob(); j.Status != store.StatusCompleted {
		e.t.Fatalf("scan %s: %s", j.Status, deref(j.ErrorMessage))
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func sweepAll(t *testing.T, x *executor.Executor) executor.ThumbSweep {
	t.Helper()
	var total executor.ThumbSweep
	for {
		r, err := x.SweepThumbnailsOnce(context.Background())
		if err != nil {
			t.Fatalf("sweep: %v", err)
		}
		total.Removed += r.Removed
		total.Refused += r.Refused
		if !r.More {
			return total
		}
	}
}

// TestSweepRemovesUnreachableThumbnails: the ready and failed thumbnails of
// files gone from the catalog (deleted or moved outside Euterpe and marked
// missing by a scan, or their catalog row gone), and those of a format or
// size the API no longer asks for, go with their cache files; the
// thumbnails of live files at the configured format and size, and every
// pending or running row, stay. Without a configured format and size, rows
// are not judged by them.
func TestSweepRemovesUnreachableThumbnails(t *testing.T) {
	for _, configured := range []bool{true, false} {
		name := "format and size configured"
		if !configured {
			name = "format and size not configured"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, true)
			ctx := context.Background()
			if configured {
				e.x.ThumbFormat, e.x.ThumbSize = store.FormatJPEG, 16
			}
			executor.SetThumbSweepBatch(e.x, 2) // several rounds
			paths := map[string]string{}
			for i, n := range []string{"kept", "deleted", "moved", "forgotten", "inflight"} {
				paths[n] = filepath.Join(e.root, n+".jpg")
				writeJPEG(t, paths[n], 20+i, 30)
			}
			e.rescan()
			type row struct {
				id    int64
				path  string
				stays bool
			}
			rows := map[string]row{}
			add := func(name string, id int64, path string, stays bool) { rows[name] = row{id, path, stays} }
			for _, n := range []string{"kept", "deleted", "moved", "forgotten"} {
				id, out := e.rendered(paths[n], store.FormatJPEG, 16)
				add(n, id, out, n == "kept")
			}
			id, out := e.rendered(paths["kept"], store.FormatJPEG, 32)
			add("kept, old size", id, out, !configured)
			id, out = e.rendered(paths["kept"], store.FormatWebP, 16)
			add("kept, old format", id, out, !configured)
			fi := e.file(paths["inflight"])
			for _, st := range []string{store.StatusPending, store.StatusRunning} {
				out := filepath.Join(e.x.Thumbs.Path(), st+".jpg")
				os.WriteFile(out, []byte("being rendered"), 0o644)
				id := insertRow(t, e, "thumbnails", map[string]any{"file_id": fi.ID, "source_path": fi.Path, "output_path": out,
					"status": st, "worker_id": "w#1", "lease_expires_at": int64(9e12), "max_size": 64})
				add("missing file, "+st, id, out, true)
			}
			failed := insertRow(t, e, "thumbnails", map[string]any{"file_id": e.file(paths["deleted"]).ID, "output_path": "",
				"status": store.StatusFailed, "max_size": 16, "error_code": "decode_failed", "error_count": 1})
			add("missing file, failed", failed, "", false)

			os.Remove(paths["deleted"])
			os.Remove(paths["inflight"])
			if err := os.Rename(paths["moved"], filepath.Join(e.root, "elsewhere.jpg")); err != nil {
				t.Fatal(err)
			}
			e.rescan()
			mustExecT(t, e, `DELETE FROM library_files WHERE path = ?`, paths["forgotten"])

			if n := sweepAll(t, e.x); n.Refused != 0 {
				t.Fatalf("%d rows refused", n.Refused)
			}
			for name, r := range rows {
				if e.rowExists(r.id) != r.stays {
					t.Errorf("%s: row left=%v, want %v", name, !r.stays, r.stays)
				}
				if r.path != "" && exists(r.path) != r.stays {
					t.Errorf("%s: cache file left=%v, want %v", name, !r.stays, r.stays)
				}
			}
			if _, err := os.Stat(paths["kept"]); err != nil {
				t.Fatalf("original touched: %v", err)
			}
			// Served again as before.
			if th := e.admit(paths["kept"], store.FormatJPEG, 16); th.ID != rows["kept"].id || th.Status != store.StatusReady {
				t.Fatalf("live thumbnail %d %s after the sweep, want %d ready", th.ID, th.Status, rows["kept"].id)
			}
			_ = ctx
		})
	}
}

type sweepFixture struct {
	e        *env
	row      int64
	cache    string
	original string // a live library file
	victim   string // a file outside the thumbnails directory, named as the cache file
}

// TestSweepNeverLeavesTheThumbnailsDirectory: whatever is found at a cache
// path, or put there between the sweep's check and its delete, the sweep
// removes nothing outside the thumbnails directory, and a row replaced or
// whose file came back in between keeps its cache file. A group cleanup
// removes its rows' files the same way.
func TestSweepNeverLeavesTheThumbnailsDirectory(t *testing.T) {
	cases := []struct {
		name string
		// before runs before the sweep, between its check and its delete.
		before, between func(t *testing.T, f *sweepFixture)
		rowGone         bool
		cacheContent    string // "" = cache path gone
		viaCleanup      bool
	}{
		{name: "symlink at the cache path, to a file outside", before: func(t *testing.T, f *sweepFixture) {
			os.Remove(f.cache)
			if err := os.Symlink(f.victim, f.cache); err != nil {
				t.Fatal(err)
			}
		}, rowGone: false, cacheContent: "victim"},
		{name: "symlink at the cache path, to the original", before: func(t *testing.T, f *sweepFixture) {
			os.Remove(f.cache)
			if err := os.Symlink(f.original, f.cache); err != nil {
				t.Fatal(err)
			}
		}, rowGone: false, cacheContent: "(original)"},
		{name: "cache file swapped for a symlink after the check", between: func(t *testing.T, f *sweepFixture) {
			os.Remove(f.cache)
			if err := os.Symlink(f.victim, f.cache); err != nil {
				t.Fatal(err)
			}
		}, rowGone: true},
		{name: "thumbnails directory swapped for a symlink after the check", between: swapThumbsDir,
			rowGone: false, cacheContent: "victim"},
		{name: "group cleanup: thumbnails directory swapped for a symlink after the check", between: swapThumbsDir,
			rowGone: false, cacheContent: "victim", viaCleanup: true},
		{name: "row replaced after the check (its file back and requested)", between: func(t *testing.T, f *sweepFixture) {
			fileID := reviveRowFile(t, f)
			mustExecT(t, f.e, `DELETE FROM thumbnails WHERE id = ?`, f.row)
			insertRow(t, f.e, "thumbnails", map[string]any{"file_id": fileID, "status": store.StatusReady, "output_path": f.cache,
				"max_size": 16})
			if err := os.WriteFile(f.cache, []byte("new picture"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, rowGone: true, cacheContent: "new picture"},
		{name: "file back in the catalog after the check", between: func(t *testing.T, f *sweepFixture) { reviveRowFile(t, f) },
			rowGone: false, cacheContent: "picture"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, false)
			ctx := context.Background()
			e.x.ThumbFormat, e.x.ThumbSize = store.FormatJPEG, 16
			gone := filepath.Join(e.root, "gone.jpg")
			original := filepath.Join(e.root, "kept.jpg")
			writeJPEG(t, gone, 20, 20)
			writeJPEG(t, original, 20, 30)
			e.rescan()
			row, cache := e.rendered(gone, store.FormatJPEG, 16)
			os.WriteFile(cache, []byte("picture"), 0o644)
			os.Remove(gone)
			e.rescan()
			orig, _ := os.ReadFile(original)
			f := &sweepFixture{e: e, row: row, cache: cache, original: original, victim: filepath.Join(e.outside, filepath.Base(cache))}
			os.WriteFile(f.victim, []byte("victim"), 0o644)
			if c.before != nil {
				c.before(t, f)
			}
			if c.between != nil {
				executor.SetBeforeCleanRow(e.x, func(id int64, _ string) {
					if id == row {
						c.between(t, f)
					}
				})
			}
			if c.viaCleanup {
				mustExecT(t, e, `UPDATE thumbnails SET group_key = 'blake3:x' WHERE id = ?`, row)
				insertRow(t, e, "thumbnail_cleanup_jobs", map[string]any{"group_key": "blake3:x", "status": "pending", "execute_after": 0})
				if did, _ := e.x.RunCleanupOnce(ctx); !did {
					t.Fatal("due cleanup not claimed")
				}
			} else {
				// An error for the swapped directory is expected; what
				// matters is what is left.
				e.x.SweepThumbnailsOnce(ctx)
			}
			if b, err := os.ReadFile(f.victim); err != nil || string(b) != "victim" {
				t.Fatalf("file outside the thumbnails directory: %q %v", b, err)
			}
			if b, err := os.ReadFile(original); err != nil || string(b) != string(orig) {
				t.Fatalf("original changed: %v", err)
			}
			if left := e.rowExists(row); left == c.rowGone {
				t.Errorf("row left=%v, want %v", left, !c.rowGone)
			}
			b, err := os.ReadFile(f.cache)
			if c.cacheContent == "(original)" {
				c.cacheContent = string(orig)
			}
			switch {
			case c.cacheContent == "" && exists(f.cache):
				t.Errorf("cache path left: %q", b)
			case c.cacheContent != "" && (err != nil || string(b) != c.cacheContent):
				t.Errorf("cache path holds %q (%v), want %q", b, err, c.cacheContent)
			}
		})
	}
}

// swapThumbsDir moves the thumbnails directory aside and puts in its place
// a symlink to the directory of the victim, which holds a file of the cache
// file's name.
func swapThumbsDir(t *testing.T, f *sweepFixture) {
	thumbs := f.e.x.Thumbs.Path()
	if err := os.Rename(thumbs, thumbs+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(f.victim), thumbs); err != nil {
		t.Fatal(err)
	}
}

// reviveRowFile marks the file of f's row live again, as a scan does when
// it finds the file back, and returns its id.
func reviveRowFile(t *testing.T, f *sweepFixture) int64 {
	var id int64
	f.e.st.DB.QueryRow(`SELECT file_id FROM thumbnails WHERE id = ?`, f.row).Scan(&id)
	mustExecT(t, f.e, `UPDATE library_files SET is_missing = 0 WHERE id = ?`, id)
	return id
}

// TestSweepThumbnailOfFileThatComesBack: a file gone (a disk unplugged, a
// folder moved away) loses its thumbnail at the sweep; once a scan finds it
// back, a request renders it again and it is served, and the sweeps after
// leave it. A file back before the sweep keeps its thumbnail.
func TestSweepThumbnailOfFileThatComesBack(t *testing.T) {
	for _, backBeforeSweep := range []bool{false, true} {
		name := "back after the sweep"
		if backBeforeSweep {
			name = "back before the sweep"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, true)
			ctx := context.Background()
			e.x.ThumbFormat, e.x.ThumbSize = store.FormatJPEG, 16
			photo := filepath.Join(e.root, "album", "photo.jpg")
			os.MkdirAll(filepath.Dir(photo), 0o755)
			writeJPEG(t, photo, 40, 30)
			writeJPEG(t, filepath.Join(e.root, "other.jpg"), 30, 30)
			e.rescan()
			fileID := e.file(photo).ID
			id, cache := e.rendered(photo, store.FormatJPEG, 16)

			aside := filepath.Join(e.outside, "album")
			if err := os.Rename(filepath.Dir(photo), aside); err != nil {
				t.Fatal(err)
			}
			e.rescan()
			if !e.file(photo).IsMissing {
				t.Fatal("moved file not marked missing")
			}
			putBack := func() {
				if err := os.Rename(aside, filepath.Dir(photo)); err != nil {
					t.Fatal(err)
				}
				e.rescan()
				if f := e.file(photo); f.IsMissing || f.ID != fileID {
					t.Fatalf("file back: missing=%v id=%d, want live %d", f.IsMissing, f.ID, fileID)
				}
			}
			if backBeforeSweep {
				putBack()
			}
			sweepAll(t, e.x)
			if e.rowExists(id) != backBeforeSweep || exists(cache) != backBeforeSweep {
				t.Fatalf("row left=%v, cache file left=%v; want both %v", e.rowExists(id), exists(cache), backBeforeSweep)
			}
			if !backBeforeSweep {
				putBack()
			}
			th := e.admit(photo, store.FormatJPEG, 16)
			if th.Status == store.StatusPending {
				if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
					t.Fatalf("render: did=%v err=%v", did, err)
				}
				th = e.admit(photo, store.FormatJPEG, 16)
			}
			if th.Status != store.StatusReady || th.OutputPath != cache {
				t.Fatalf("thumbnail %s at %s, want ready at %s", th.Status, th.OutputPath, cache)
			}
			f, err := e.p.OpenReady(th)
			if err != nil {
				t.Fatalf("serve: %v", err)
			}
			f.Close()
			if n := sweepAll(t, e.x); n.Removed != 0 || !e.rowExists(th.ID) || !exists(cache) {
				t.Fatalf("sweep after the file came back removed %d rows (row left=%v, cache left=%v)", n.Removed, e.rowExists(th.ID), exists(cache))
			}
		})
	}
}

// TestSweepAndGroupCleanupTogether: a group cleanup and the sweep reaching
// the same rows, one right between the other's check and its delete, or
// both at once on two executors, remove each row and its file once, without
// an error and without a failed cleanup.
func TestSweepAndGroupCleanupTogether(t *testing.T) {
	const group = "blake3:0123"
	setup := func(t *testing.T, rows int) (*env, *executor.Executor, []string) {
		e := newEnv(t, false)
		e.x.ThumbFormat, e.x.ThumbSize = store.FormatJPEG, 16
		x := e.x
		x2 := &executor.Executor{Store: x.Store, Roots: x.Roots, Thumbs: x.Thumbs, Trash: x.Trash, Log: x.Log,
			WorkerID: "second", LeaseTTL: x.LeaseTTL, Poll: x.Poll, ThumbFormat: store.FormatJPEG, ThumbSize: 16}
		var paths []string
		for i := range rows {
			p := filepath.Join(e.x.Thumbs.Path(), "gone-"+string(rune('a'+i%26))+string(rune('a'+i/26))+".jpg")
			os.WriteFile(p, []byte("picture"), 0o644)
			// file_id with no catalog row: a file gone from the catalog.
			insertRow(t, e, "thumbnails", map[string]any{"file_id": 100000 + i, "group_key": group, "status": store.StatusReady,
				"output_path": p, "max_size": 16})
			paths = append(paths, p)
		}
		insertRow(t, e, "thumbnail_cleanup_jobs", map[string]any{"group_key": group, "status": "pending", "execute_after": 0})
		return e, x2, paths
	}
	check := func(t *testing.T, e *env, paths []string) {
		t.Helper()
		var left int
		e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails`).Scan(&left)
		if left != 0 {
			t.Errorf("%d rows left", left)
		}
		for _, p := range paths {
			if exists(p) {
				t.Errorf("cache file %s left", p)
			}
		}
		var status string
		e.st.DB.QueryRow(`SELECT status FROM thumbnail_cleanup_jobs`).Scan(&status)
		if status != store.StatusCompleted {
			t.Errorf("cleanup %s", status)
		}
	}
	ctx := context.Background()
	t.Run("cleanup between the sweep's check and delete", func(t *testing.T) {
		e, x2, paths := setup(t, 3)
		once := false
		executor.SetBeforeCleanRow(e.x, func(int64, string) {
			if !once {
				once = true
				if did, err := x2.RunCleanupOnce(ctx); !did || err != nil {
					t.Errorf("cleanup did=%v err=%v", did, err)
				}
			}
		})
		if r, err := e.x.SweepThumbnailsOnce(ctx); err != nil || r.Removed != 0 {
			t.Fatalf("sweep removed %d, err %v; want 0 (the cleanup removed them)", r.Removed, err)
		}
		check(t, e, paths)
	})
	t.Run("sweep between the cleanup's check and delete", func(t *testing.T) {
		e, x2, paths := setup(t, 3)
		once := false
		executor.SetBeforeCleanRow(e.x, func(int64, string) {
			if !once {
				once = true
				if r, err := x2.SweepThumbnailsOnce(ctx); err != nil || r.Removed != 3 {
					t.Errorf("sweep removed %d, err %v", r.Removed, err)
				}
			}
		})
		if did, err := e.x.RunCleanupOnce(ctx); !did || err != nil {
			t.Fatalf("cleanup did=%v err=%v", did, err)
		}
		check(t, e, paths)
	})
	t.Run("both at once", func(t *testing.T) {
		e, x2, paths := setup(t, 60)
		executor.SetThumbSweepBatch(x2, 7)
		errs := make(chan error, 2)
		go func() {
			_, err := e.x.RunCleanupOnce(ctx)
			errs <- err
		}()
		go func() {
			for {
				r, err := x2.SweepThumbnailsOnce(ctx)
				if err != nil || !r.More {
					errs <- err
					return
				}
			}
		}()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		check(t, e, paths)
	})
}

// TestSweepSchedule: the cleanup loop sweeps when no group cleanup is due,
// a pass at most every ThumbSweepEvery, in rounds of a bounded number of
// rows a poll apart; a row whose cache path is refused does not hold back
// the rows after it.
func TestSweepSchedule(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	e.x.ThumbSweepEvery = time.Hour
	executor.SetThumbSweepBatch(e.x, 2)
	victim := filepath.Join(e.outside, "victim")
	os.WriteFile(victim, []byte("victim"), 0o644)
	orphan := func(name string) (int64, string) {
		p := filepath.Join(e.x.Thumbs.Path(), name)
		os.WriteFile(p, []byte("picture"), 0o644)
		return insertRow(t, e, "thumbnails", map[string]any{"file_id": 424242, "status": store.StatusReady, "output_path": p, "max_size": 16}), p
	}
	refused, link := orphan("0_16.jpg")
	os.Remove(link)
	os.Symlink(victim, link)
	for _, n := range []string{"1_16.jpg", "2_16.jpg", "3_16.jpg", "4_16.jpg"} {
		orphan(n)
	}
	// A due group cleanup goes first; the sweep waits for a round with none.
	insertRow(t, e, "thumbnail_cleanup_jobs", map[string]any{"group_key": "blake3:none", "status": "pending", "execute_after": 0})
	if did, err := e.x.RunCleanupOnce(ctx); !did || err != nil {
		t.Fatalf("cleanup did=%v err=%v", did, err)
	}
	left := func() int {
		var n int
		e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails`).Scan(&n)
		return n
	}
	if n := left(); n != 5 {
		t.Fatalf("%d rows left after a group cleanup round, want 5", n)
	}
	// Rows 0 (refused) and 1, then 2 and 3, then 4: a round each.
	for round, want := range []int{4, 2, 1} {
		if did, err := e.x.RunCleanupOnce(ctx); did || err != nil {
			t.Fatalf("round %d: did=%v err=%v", round, did, err)
		}
		if n := left(); n != want {
			t.Fatalf("round %d: %d rows left, want %d", round, n, want)
		}
	}
	if !e.rowExists(refused) || !exists(link) {
		t.Fatal("refused row or its symlink removed")
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "victim" {
		t.Fatalf("symlink target: %q %v", b, err)
	}
	// The pass is over: the next is an hour away.
	orphan("5_16.jpg")
	for range 3 {
		e.x.RunCleanupOnce(ctx)
	}
	if n := left(); n != 2 {
		t.Fatalf("%d rows left, want 2: a sweep ran before ThumbSweepEvery", n)
	}
}
