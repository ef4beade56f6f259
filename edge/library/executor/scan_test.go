package executor_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// A root that vanished fails the scan; the stored message stays capped
// however long the root paths (and their errors) are.
func TestScanRootErrorsCapped(t *testing.T) {
	e := newEnv(t, false)
	var roots []string
	for _, name := range []string{"a", "b", "c"} {
		p := filepath.Join(e.outside, name, strings.Repeat("long-directory-name-", 10), strings.Repeat("x", 200))
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		roots = append(roots, p)
	}
	rs, err := pathsafe.NewRoots(roots)
	if err != nil {
		t.Fatal(err)
	}
	e.x.Roots = rs
	for _, r := range roots {
		if err := os.RemoveAll(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.p.EnqueueScan(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.runJob()
	var status string
	var msg *string
	if err := e.st.DB.QueryRow(`SELECT status, error_message FROM scan_sessions ORDER BY id DESC`).Scan(&status, &msg); err != nil {
		t.Fatal(err)
	}
	if status != store.StatusFailed || msg == nil || !strings.HasPrefix(*msg, "roots not walked: ") {
		t.Fatalf("scan session %s %v", status, deref(msg))
	}
	if n := len(*msg); n > daemon.MaxMessage {
		t.Fatalf("scan session message is %d bytes, want at most %d", n, daemon.MaxMessage)
	}
}

// TestRewriteKeepingSizeAndMtimeIsRehashed: a tag editor that rewrites a
// file in place with the same size and puts its mtime back (or a file
// replaced by a same-sized one with the old mtime) leaves size and mtime as
// the catalog recorded them; the ctime (and for a replacement the inode)
// still differ, so the next scan re-hashes the file and it leaves the
// duplicate group it no longer belongs to.
func TestRewriteKeepingSizeAndMtimeIsRehashed(t *testing.T) {
	cases := []struct {
		name    string
		rewrite func(path string) error
	}{
		{"rewritten in place", func(p string) error { return os.WriteFile(p, []byte("tagged!"), 0o644) }},
		{"replaced by rename", func(p string) error {
			tmp := p + ".tmp"
			if err := os.WriteFile(tmp, []byte("tagged!"), 0o644); err != nil {
				return err
			}
			return os.Rename(tmp, p)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			a := e.write("a.flac", "origin!")
			b := e.write("b.flac", "origin!")
			e.scanAndHash()
			before := e.file(b)
			if gs := e.groups(); len(gs) != 1 || gs[0].FileCount != 2 {
				t.Fatalf("groups %+v", gs)
			}
			st, err := os.Stat(b)
			if err != nil {
				t.Fatal(err)
			}
			// The kernel stamps ctime from a coarse clock: rewrite until it
			// shows, as a second edit later would.
			for {
				if err := c.rewrite(b); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(b, st.ModTime(), st.ModTime()); err != nil {
					t.Fatal(err)
				}
				var now syscall.Stat_t
				if err := syscall.Stat(b, &now); err != nil {
					t.Fatal(err)
				}
				if now.Ctim.Nano() != *before.CtimeNS || int64(now.Ino) != *before.Inode {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if now, _ := os.Stat(b); now.Size() != st.Size() || !now.ModTime().Equal(st.ModTime()) {
				t.Fatalf("fixture: size or mtime differ (%d %v)", now.Size(), now.ModTime())
			}
			e.scanAndHash()
			fa, fb := e.file(a), e.file(b)
			if fb.NeedsHash || *fb.ContentHash == *fa.ContentHash || *fb.ContentHash == *before.ContentHash {
				t.Fatalf("b after the rewrite: needs_hash=%v hash=%s, a's %s", fb.NeedsHash, *fb.ContentHash, *fa.ContentHash)
			}
			if gs := e.groups(); len(gs) != 0 {
				t.Fatalf("b still grouped with a: %+v", gs)
			}
		})
	}
}

// scanSession is the latest scan session.
type scanSession struct {
	id, job               int64
	status                string
	seen, missing, unread int64
	finished              *int64
	msg                   *string
}

func (e *env) lastSession() scanSession {
	e.t.Helper()
	var s scanSession
	if err := e.st.DB.QueryRow(`SELECT id, job_id, status, files_seen, files_missing, paths_unreadable, finished_at, error_message
FROM scan_sessions ORDER BY id DESC LIMIT 1`).Scan(&s.id, &s.job, &s.status, &s.seen, &s.missing, &s.unread, &s.finished, &s.msg); err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) scan() store.Job {
	e.t.Helper()
	if _, err := e.p.EnqueueScan(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	return e.runJob()
}

// denyAsRoot skips a case that needs file permissions to deny access: root
// reads every directory whatever its mode.
func denyAsRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions; the injected cases cover this path")
	}
}

// chmod sets path's mode for the test and gives it back afterwards, so the
// temporary directory can be removed.
func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(path, 0o755) })
}

func denyDir(dir string, errno syscall.Errno) func(string) error {
	return func(p string) error {
		if p == dir {
			return &fs.PathError{Op: "open", Path: p, Err: errno}
		}
		return nil
	}
}

// TestScanKeepsFilesOfUnreadableDirectory: a directory below a root that
// the scan cannot read says nothing about the files catalogued under it.
// They keep their state (and their duplicate group), the scan counts and
// names the path and still completes, and a file that really disappeared
// elsewhere is marked missing. A directory that is really gone takes its
// files with it.
func TestScanKeepsFilesOfUnreadableDirectory(t *testing.T) {
	cases := []struct {
		name   string
		deny   func(t *testing.T, e *env, locked string)
		unread int64 // paths the scan reports unread
		kept   bool  // the files under locked keep their state
	}{
		{"permission denied", func(t *testing.T, e *env, locked string) {
			executor.SetScanDir(e.x, denyDir(locked, syscall.EACCES))
		}, 1, true},
		{"I/O error", func(t *testing.T, e *env, locked string) {
			executor.SetScanDir(e.x, denyDir(locked, syscall.EIO))
		}, 1, true},
		{"mode 000", func(t *testing.T, e *env, locked string) {
			denyAsRoot(t)
			chmod(t, locked, 0)
		}, 1, true},
		{"listable, not searchable (mode 644)", func(t *testing.T, e *env, locked string) {
			denyAsRoot(t)
			chmod(t, locked, 0o644) // b.flac cannot be stat'ed, sub cannot be opened
		}, 2, true},
		{"directory removed", func(t *testing.T, e *env, locked string) {
			if err := os.RemoveAll(locked); err != nil {
				t.Fatal(err)
			}
		}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			a := e.write("ok/a.flac", "same!")
			b := e.write("locked/b.flac", "same!")
			sub := e.write("locked/sub/c.flac", "other")
			gone := e.write("gone.flac", "gone!")
			locked := filepath.Join(e.root, "locked")
			e.scanAndHash()
			if gs := e.groups(); len(gs) != 1 || gs[0].FileCount != 2 {
				t.Fatalf("groups before %+v", gs)
			}
			if err := os.Remove(gone); err != nil {
				t.Fatal(err)
			}
			c.deny(t, e, locked)
			if j := e.scan(); j.Status != store.StatusCompleted {
				t.Fatalf("scan %s: %s", j.Status, deref(j.ErrorMessage))
			}
			s := e.lastSession()
			wantMissing := int64(1)
			if !c.kept {
				wantMissing = 3
			}
			if s.status != store.StatusSucceeded || s.unread != c.unread || s.missing != wantMissing {
				t.Fatalf("session %s unread=%d missing=%d %q, want succeeded unread=%d missing=%d",
					s.status, s.unread, s.missing, deref(s.msg), c.unread, wantMissing)
			}
			if c.unread > 0 && !strings.Contains(deref(s.msg), locked) {
				t.Fatalf("session message %q does not name %s", deref(s.msg), locked)
			}
			if !e.file(gone).IsMissing || e.file(a).IsMissing {
				t.Fatal("gone.flac must be missing and ok/a.flac not")
			}
			for _, p := range []string{b, sub} {
				if f := e.file(p); f.IsMissing == c.kept {
					t.Fatalf("%s missing=%v, want %v", p, f.IsMissing, !c.kept)
				}
			}
			wantGroups := 0
			if c.kept {
				wantGroups = 1
			}
			if gs := e.groups(); len(gs) != wantGroups {
				t.Fatalf("groups after %+v, want %d", gs, wantGroups)
			}
			if !c.kept {
				return
			}
			// Readable again: a clean scan, the group intact.
			executor.SetScanDir(e.x, nil)
			os.Chmod(locked, 0o755)
			if j := e.scan(); j.Status != store.StatusCompleted {
				t.Fatalf("scan %s: %s", j.Status, deref(j.ErrorMessage))
			}
			if s := e.lastSession(); s.unread != 0 || s.missing != 0 || s.msg != nil {
				t.Fatalf("scan once readable: unread=%d missing=%d %q", s.unread, s.missing, deref(s.msg))
			}
			if gs := e.groups(); len(gs) != 1 || gs[0].FileCount != 2 {
				t.Fatalf("groups once readable %+v", gs)
			}
		})
	}
}

// TestScanRootWhoseOnlyDirectoryIsUnreadable: a root in which the scan
// sees no file but finds a directory it cannot read is there (not an empty
// mount point): the scan completes and the files under that directory keep
// their state.
func TestScanRootWhoseOnlyDirectoryIsUnreadable(t *testing.T) {
	e := newEnv(t, true)
	b, c := e.write("locked/b.flac", "b"), e.write("locked/c.flac", "c")
	if j := e.scan(); j.Status != store.StatusCompleted {
		t.Fatalf("first scan %s: %s", j.Status, deref(j.ErrorMessage))
	}
	locked := filepath.Join(e.root, "locked")
	executor.SetScanDir(e.x, denyDir(locked, syscall.EACCES))
	if j := e.scan(); j.Status != store.StatusCompleted {
		t.Fatalf("scan %s: %s", j.Status, deref(j.ErrorMessage))
	}
	want := "1 path not read, their files kept: open " + locked + ": permission denied"
	if s := e.lastSession(); s.status != store.StatusSucceeded || s.seen != 0 || s.unread != 1 || s.missing != 0 || deref(s.msg) != want {
		t.Fatalf("session %s seen=%d unread=%d missing=%d %q, want %q", s.status, s.seen, s.unread, s.missing, deref(s.msg), want)
	}
	for _, p := range []string{b, c} {
		if e.file(p).IsMissing {
			t.Fatalf("%s marked missing", p)
		}
	}
}

// TestScanRootNotWalkedKeepsItsFiles: a root that is gone, cannot be read,
// or shows no file at all while the catalog holds some (a disk not mounted
// on its mount point) is not walked: none of its files is marked missing
// and the scan fails naming it, while a file deleted from another root is
// still marked missing.
func TestScanRootNotWalkedKeepsItsFiles(t *testing.T) {
	cases := []struct {
		name string
		// lose makes root unusable.
		lose func(t *testing.T, e *env, root string)
		want string // in the session message
	}{
		{"root removed", func(t *testing.T, e *env, root string) {
			if err := os.RemoveAll(root); err != nil {
				t.Fatal(err)
			}
		}, "no such file or directory"},
		{"root permission denied", func(t *testing.T, e *env, root string) {
			executor.SetScanDir(e.x, denyDir(root, syscall.EACCES))
		}, "permission denied"},
		{"root mode 000", func(t *testing.T, e *env, root string) {
			denyAsRoot(t)
			chmod(t, root, 0)
		}, "permission denied"},
		{"root empty: disk not mounted", func(t *testing.T, e *env, root string) {
			if err := os.Rename(root, root+".away"); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "no file found, while the catalog holds 2 there (not mounted?)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			other := addRoot(t, e)
			a, b := e.write("a.flac", "a"), e.write("sub/b.flac", "b")
			kept, gone := filepath.Join(other, "kept.flac"), filepath.Join(other, "gone.flac")
			for _, p := range []string{kept, gone} {
				if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if j := e.scan(); j.Status != store.StatusCompleted {
				t.Fatalf("first scan %s: %s", j.Status, deref(j.ErrorMessage))
			}
			if err := os.Remove(gone); err != nil {
				t.Fatal(err)
			}
			c.lose(t, e, e.root)
			if j := e.scan(); j.Status != store.StatusFailed || deref(j.ErrorCode) != executor.CodeScanFailed {
				t.Fatalf("scan %s %s, want failed %s", j.Status, deref(j.ErrorCode), executor.CodeScanFailed)
			}
			s := e.lastSession()
			prefix := "roots not walked: " + e.root + ": "
			if s.status != store.StatusFailed || s.missing != 1 || !strings.HasPrefix(deref(s.msg), prefix) || !strings.Contains(deref(s.msg), c.want) {
				t.Fatalf("session %s missing=%d %q, want failed missing=1 %q…%q", s.status, s.missing, deref(s.msg), prefix, c.want)
			}
			for _, p := range []string{a, b, kept} {
				if e.file(p).IsMissing {
					t.Fatalf("%s marked missing", p)
				}
			}
			if !e.file(gone).IsMissing {
				t.Fatal("file deleted from the other root not marked missing")
			}
		})
	}
	t.Run("empty root, empty catalog", func(t *testing.T) {
		e := newEnv(t, true)
		if j := e.scan(); j.Status != store.StatusCompleted {
			t.Fatalf("scan of an empty library %s: %s", j.Status, deref(j.ErrorMessage))
		}
	})
}

// TestScanLeavesStagedDeletesOut: a name a delete stages a file under
// (.euterpe-delete-<job>-<file>, left by a run stopped mid-move) belongs
// to that delete's rerun, which finishes or undoes it; cataloguing it
// would let another job keep a file the rerun then unlinks.
func TestScanLeavesStagedDeletesOut(t *testing.T) {
	e := newEnv(t, true)
	a := e.write("a.flac", "a")
	staged := []string{e.write(".euterpe-delete-7-3", "a"), e.write("sub/.euterpe-delete-12-40", "b")}
	other := e.write("sub/.euterpe-deleted-notes", "c") // not the staging prefix: a file like any other
	if j := e.scan(); j.Status != store.StatusCompleted {
		t.Fatalf("scan %s: %s", j.Status, deref(j.ErrorMessage))
	}
	e.file(a)
	e.file(other)
	for _, p := range staged {
		var n int
		if err := e.st.DB.QueryRow(`SELECT count(*) FROM library_files WHERE path = ?`, p).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s catalogued (%d, %v)", p, n, err)
		}
	}
}
