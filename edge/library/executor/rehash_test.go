package executor_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// groups lists every duplicate group (one page is enough here).
func (e *env) groups() []store.Group {
	e.t.Helper()
	gs, _, err := e.st.ListGroups(context.Background(), nil, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	return gs
}

// TestHashAlgorithmChangeRehashesLibrary: a library hashed with blake3, the
// setting changed to sha256. Whether a copy is added (the next scan's hash
// pass) or nothing changes (the policy tick after the last blake3 pass), the
// old files are hashed again with sha256 and the copies form one sha256
// group. In between, a file awaiting its new digest is in no group, and a
// delete authorised against the old blake3 group is refused.
func TestHashAlgorithmChangeRehashesLibrary(t *testing.T) {
	cases := []struct {
		name      string
		addCopy   bool
		wantFiles int64
	}{
		{"copy added", true, 3},
		{"nothing changed", false, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			ctx := context.Background()
			a := e.write("a.txt", "same content")
			b := e.write("b.txt", "same content")
			e.write("other.txt", "something else")
			e.scanAndHash()
			old := groupOf(t, e.file(a))
			if gs := e.groups(); len(gs) != 1 || gs[0].HashAlgorithm != store.AlgoBLAKE3 || gs[0].FileCount != 2 {
				t.Fatalf("blake3 groups %+v", gs)
			}

			e.p.HashAlgorithm = store.AlgoSHA256
			if c.addCopy {
				e.write("c.txt", "same content")
				if _, err := e.p.EnqueueScan(ctx); err != nil {
					t.Fatal(err)
				}
				if j := e.runJob(); j.Kind != store.KindScan || j.Status != store.StatusCompleted {
					t.Fatalf("scan %s %s", j.Kind, j.Status)
				}
			}
			// A delete authorised in the blake3 group before the re-hash is
			// enqueued, run after it.
			del, err := e.p.RequestDelete(ctx, old, policy.DeleteRequest{KeepFileIDs: []int64{e.file(a).ID}, DeleteFileIDs: []int64{e.file(b).ID}})
			if err != nil {
				t.Fatal(err)
			}
			// The policy tick: after a completed scan (new file) or the last
			// blake3 pass (nothing changed).
			if ok, err := e.p.AutoHash(ctx); !ok || err != nil {
				t.Fatalf("auto hash after the switch: enqueued=%v err=%v", ok, err)
			}
			// Enqueued, not yet run: the blake3 digests are out of every
			// group, so no group mixes two algorithms' digests.
			if gs := e.groups(); len(gs) != 0 {
				t.Fatalf("groups while re-hash is pending: %+v", gs)
			}
			if f := e.file(a); !f.NeedsHash {
				t.Fatalf("blake3 file not queued for re-hash: %+v", f)
			}
			if _, err := e.p.RequestDelete(ctx, old, policy.DeleteRequest{KeepFileIDs: []int64{e.file(a).ID}, DeleteFileIDs: []int64{e.file(b).ID}}); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("delete in the old group while re-hash is pending: %v", err)
			}
			if j := e.runJob(); j.ID != del.ID || j.Status == store.StatusCompleted {
				t.Fatalf("delete job while re-hash is pending: %d %s", j.ID, j.Status)
			}
			for _, d := range decisions(t, e, del.ID) {
				if d.Decision != executor.DecisionRefused {
					t.Fatalf("decision while re-hash is pending: %+v", d)
				}
			}
			if _, err := os.Stat(b); err != nil {
				t.Fatalf("b removed while re-hash was pending: %v", err)
			}
			if j := e.runJob(); j.Kind != store.KindHash || j.Status != store.StatusCompleted {
				t.Fatalf("hash %s %s: %s", j.Kind, j.Status, deref(j.ErrorMessage))
			}

			gs := e.groups()
			if len(gs) != 1 || gs[0].HashAlgorithm != store.AlgoSHA256 || gs[0].FileCount != c.wantFiles {
				t.Fatalf("groups after re-hash %+v, want one sha256 group of %d", gs, c.wantFiles)
			}
			var blake3Rows int
			e.st.DB.QueryRow(`SELECT COUNT(*) FROM library_files WHERE hash_algorithm = 'blake3' OR needs_hash = 1`).Scan(&blake3Rows)
			if blake3Rows != 0 {
				t.Fatalf("%d files still blake3 or queued", blake3Rows)
			}
			// The pass with the configured algorithm is the last: no endless jobs.
			if ok, err := e.p.AutoHash(ctx); ok || err != nil {
				t.Fatalf("auto hash after the sha256 pass: enqueued=%v err=%v", ok, err)
			}
		})
	}
}
