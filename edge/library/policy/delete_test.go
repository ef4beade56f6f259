package policy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestRequestDeleteIsOneTransaction: the delete job and its group's
// thumbnail cleanup are written together or not at all. When the cleanup
// cannot be written (here a trigger stands for a full disk or any other
// failure of the second statement), no delete job is left behind without
// the cleanup that removes its copies' thumbnails, and the executor is not
// woken for it.
func TestRequestDeleteIsOneTransaction(t *testing.T) {
	cases := []struct {
		name        string
		failCleanup bool
	}{
		{"both written", false},
		{"cleanup refused: nothing written", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			hash := strings.Repeat("a", 64)
			for _, p := range []string{"/lib/a", "/lib/b"} {
				e.insert("library_files", map[string]any{"root": "/lib", "path": p, "size_bytes": 10,
					"hash_algorithm": store.AlgoBLAKE3, "content_hash": hash, "is_missing": 0, "needs_hash": 0})
			}
			if c.failCleanup {
				if _, err := e.st.DB.Exec(`CREATE TRIGGER refuse_cleanup BEFORE INSERT ON thumbnail_cleanup_jobs
BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`); err != nil {
					t.Fatal(err)
				}
			}
			wakes := e.wakes.Load()
			_, err := e.p.RequestDelete(ctx, store.GroupKey{Algorithm: store.AlgoBLAKE3, HashHex: hash},
				policy.DeleteRequest{KeepFileIDs: []int64{1}, DeleteFileIDs: []int64{2}})
			jobs := e.count(`SELECT COUNT(*) FROM jobs WHERE kind = 'delete'`)
			cleanups := e.count(`SELECT COUNT(*) FROM thumbnail_cleanup_jobs`)
			if !c.failCleanup {
				if err != nil || jobs != 1 || cleanups != 1 || e.wakes.Load() == wakes {
					t.Fatalf("err %v, %d delete jobs, %d cleanups, woken %v; want both rows and a wake",
						err, jobs, cleanups, e.wakes.Load() != wakes)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "disk is full") {
				t.Fatalf("err = %v, want the cleanup's failure", err)
			}
			if jobs != 0 || cleanups != 0 || e.wakes.Load() != wakes {
				t.Fatalf("%d delete jobs and %d cleanups left, woken %v; want none", jobs, cleanups, e.wakes.Load() != wakes)
			}
		})
	}
}
