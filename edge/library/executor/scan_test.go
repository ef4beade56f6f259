package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
