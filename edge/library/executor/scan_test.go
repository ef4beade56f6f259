package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
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
