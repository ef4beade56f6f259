package policy_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// t0 is the fixed start of every test clock (Unix ms).
const t0 = int64(1_700_000_000_000)

// env is a policy over a real SQLite file whose clock the test moves.
type env struct {
	t     *testing.T
	st    *store.Store
	p     *policy.Policy
	clock atomic.Int64 // Unix ms
	wakes atomic.Int32
}

// template is a migrated, checkpointed library.db that each test copies,
// so the tests do not pay for the migrations every time.
var template string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "library-policy-")
	if err != nil {
		panic(err)
	}
	template = filepath.Join(dir, "library.db")
	st, err := store.Open(context.Background(), template)
	if err != nil {
		panic(err)
	}
	if _, err := st.DB.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		panic(err)
	}
	st.Close()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(template)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "library.db"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), filepath.Join(dir, "library.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, st: st}
	e.clock.Store(t0)
	st.Now = func() time.Time { return time.UnixMilli(e.clock.Load()) }
	e.p = &policy.Policy{
		Store: st, HashAlgorithm: store.AlgoBLAKE3, ThumbQueueCapacity: 4, ThumbMaxAttempts: 3,
		ThumbsDir: filepath.Join(dir, "thumbs"), CleanupDelay: time.Minute, MaxJobRetries: 3,
		Wake: func() { e.wakes.Add(1) },
	}
	return e
}

func (e *env) now() int64 { return e.clock.Load() }

func (e *env) advance(d time.Duration) { e.clock.Add(d.Milliseconds()) }

// insert adds one row to table with the given column values and returns its id.
func (e *env) insert(table string, cols map[string]any) int64 {
	e.t.Helper()
	names := make([]string, 0, len(cols))
	marks := make([]string, 0, len(cols))
	args := make([]any, 0, len(cols))
	for c, v := range cols {
		names = append(names, c)
		marks = append(marks, "?")
		args = append(args, v)
	}
	res, err := e.st.DB.Exec(`INSERT INTO `+table+`(`+strings.Join(names, ", ")+`) VALUES (`+strings.Join(marks, ", ")+`)`, args...)
	if err != nil {
		e.t.Fatalf("insert %s %v: %v", table, cols, err)
	}
	id, _ := res.LastInsertId()
	return id
}

func (e *env) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.st.DB.QueryRow(q, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (e *env) job(id int64) store.Job {
	e.t.Helper()
	j, err := e.st.GetJob(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// at returns t0+d in Unix ms, as a pointer for nullable columns.
func at(d time.Duration) *int64 { v := t0 + d.Milliseconds(); return &v }

func nullable(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// policySched is a scheduler over e's policy with a small WAL threshold.
func policySched(e *env) *policy.Scheduler {
	return &policy.Scheduler{
		Policy: e.p, Backoff: halfJitter,
		WALPath: e.st.Path + "-wal", WALBytes: walThreshold, WALMode: store.ModeRestart,
	}
}

func ptr[T any](v T) *T { return &v }
