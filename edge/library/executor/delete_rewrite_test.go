package executor_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// rewriteKeepingMtime overwrites p in place with other bytes of the same
// length and puts its mtime back, as a tag editor that preserves the
// modification time does; only the ctime shows the change.
func rewriteKeepingMtime(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	// The ctime has the kernel's coarse clock: let it tick past the
	// verification's stat first.
	time.Sleep(20 * time.Millisecond)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(strings.Repeat("X", int(st.Size()))), 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chtimes(p, st.ModTime(), st.ModTime())
}

// TestDeleteRefusesRewriteKeepingSizeAndMtime rewrites, after both files
// were verified by re-hash and before the delete's last check, either the
// kept copy or the file to delete in place with the same size and the old
// mtime restored. Either way the file to delete may now be the only copy
// of its content, so it must stay where it is.
func TestDeleteRefusesRewriteKeepingSizeAndMtime(t *testing.T) {
	for _, which := range []string{"kept", "deleted"} {
		for _, permanent := range []bool{false, true} {
			name := which + "/trash"
			if permanent {
				name = which + "/permanent"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, true)
				kept, del, fk, fd := dupPair(t, e)
				target := kept
				if which == "deleted" {
					target = del
				}
				executor.SetDeleteHooks(e.x, func(p string) {
					if p == del {
						mustSwap(t, func() error { return rewriteKeepingMtime(target) })
					}
				}, nil)
				j := requestPair(t, e, fk, fd, permanent)
				got := e.runJob()
				d := decisions(t, e, j.ID)[fd.ID]
				if got.Status != store.StatusFailed || d.Decision != executor.DecisionRefused {
					t.Fatalf("job %s, decision %+v: want refused", got.Status, d)
				}
				if _, err := os.Stat(del); err != nil {
					t.Fatalf("file to delete is gone: %v", err)
				}
				if n := trashFiles(t, e); n != 0 {
					t.Fatalf("%d files in the trash after a refused delete", n)
				}
			})
		}
	}
}
