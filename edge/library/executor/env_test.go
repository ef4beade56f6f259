package executor_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

type env struct {
	t       *testing.T
	root    string // library root
	outside string // a directory outside every root
	state   string
	st      *store.Store
	x       *executor.Executor
	p       *policy.Policy
}

// newEnv builds a library on temp directories. guard installs triggers
// that abort any forbidden column change on the job and catalog tables and
// turns on write-path marking, so each executor or catalog UPDATE is checked
// against its own path's columns; only tests where every UPDATE of those
// tables comes from the executor, the catalog, the policy side or a fixture
// writing whitelisted columns use it.
func newEnv(t *testing.T, guard bool) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{t: t, root: filepath.Join(base, "lib"), outside: filepath.Join(base, "outside"), state: filepath.Join(base, "state")}
	for _, d := range []string{e.root, e.outside, e.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(e.state, "library.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.st = st
	if guard {
		installGuards(t, st)
	}
	roots, err := pathsafe.NewRoots([]string{e.root})
	if err != nil {
		t.Fatal(err)
	}
	thumbs, _ := pathsafe.NewDir(filepath.Join(e.state, "thumbs"))
	trash, _ := pathsafe.NewDir(filepath.Join(e.state, "trash"))
	e.x = &executor.Executor{
		Store: st, Roots: roots, Thumbs: thumbs, Trash: trash,
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		WorkerID: "test-worker", LeaseTTL: 3 * time.Second, Poll: 10 * time.Millisecond,
		Retry:                 lease.Backoff{Base: 50 * time.Millisecond, Cap: 200 * time.Millisecond},
		CheckpointBusyTimeout: 50 * time.Millisecond,
	}
	e.p = &policy.Policy{Store: st, HashAlgorithm: store.AlgoBLAKE3, ThumbQueueCapacity: 8, ThumbMaxAttempts: 3,
		ThumbsDir: thumbs.Path(), MaxJobRetries: 3}
	return e
}

func installGuards(t *testing.T, st *store.Store) {
	t.Helper()
	for table := range executor.GuardedPaths() {
		cols, err := store.TableColumns(context.Background(), st.DB, table)
		if err != nil {
			t.Fatal(err)
		}
		var all []string
		for c := range cols {
			all = append(all, c)
		}
		for _, q := range executor.GuardTriggers(table, all) {
			if _, err := st.DB.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	st.MarkPaths()
}

func (e *env) write(rel, content string) string {
	e.t.Helper()
	p := filepath.Join(e.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// runJob enqueues nothing; it claims and runs the next job and returns it.
func (e *env) runJob() store.Job {
	e.t.Helper()
	did, err := e.x.RunJobOnce(context.Background())
	if err != nil || !did {
		e.t.Fatalf("RunJobOnce did=%v err=%v", did, err)
	}
	var id int64
	e.st.DB.QueryRow(`SELECT id FROM jobs WHERE status NOT IN ('pending','running') ORDER BY finished_at DESC, id DESC LIMIT 1`).Scan(&id)
	j, err := e.st.GetJob(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

func (e *env) scanAndHash() {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.p.EnqueueScan(ctx); err != nil {
		e.t.Fatal(err)
	}
	if j := e.runJob(); j.Status != store.StatusCompleted {
		e.t.Fatalf("scan %s: %v", j.Status, deref(j.ErrorMessage))
	}
	if _, err := e.p.EnqueueHash(ctx); err != nil {
		e.t.Fatal(err)
	}
	if j := e.runJob(); j.Status != store.StatusCompleted || j.Progress != 1 {
		e.t.Fatalf("hash %s %.2f: %v", j.Status, j.Progress, deref(j.ErrorMessage))
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (e *env) file(path string) store.File {
	e.t.Helper()
	var id int64
	if err := e.st.DB.QueryRow(`SELECT id FROM library_files WHERE path = ?`, path).Scan(&id); err != nil {
		e.t.Fatalf("file %s: %v", path, err)
	}
	f, _ := e.st.GetFile(context.Background(), id)
	return f
}

// stagedPath is the name a delete of job jobID moves file fileID at path
// aside to, in its own directory, while it copies it to a trash on another
// filesystem.
func stagedPath(path string, jobID, fileID int64) string {
	return filepath.Join(filepath.Dir(path), ".euterpe-delete-"+strconv.FormatInt(jobID, 10)+"-"+strconv.FormatInt(fileID, 10))
}

// exdev is a rename that fails as across filesystems.
func exdev(o, n string) error { return &os.LinkError{Op: "rename", Old: o, New: n, Err: syscall.EXDEV} }

// crossDevice makes x's moves into the trash fail as across filesystems,
// so its deletes take the staged copy.
func crossDevice(x *executor.Executor) { executor.SetRename(x, exdev) }

// requestPair asks for a delete of fd keeping fk, both of one group.
func requestPair(t *testing.T, e *env, fk, fd store.File, permanent bool) store.Job {
	t.Helper()
	j, err := e.p.RequestDelete(context.Background(), groupOf(t, fk),
		policy.DeleteRequest{KeepFileIDs: []int64{fk.ID}, DeleteFileIDs: []int64{fd.ID}, Permanent: permanent})
	if err != nil {
		t.Fatal(err)
	}
	return j
}
