package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
)

// A lease fenced while a stage runs (its context cancelled at the lease
// deadline) stops the chain there: a stage that ignores its context and
// returns normally must not hand its output to the next one, storage above
// all, which would write after another worker may have taken the job.
func TestPipelineStopsAtTheFence(t *testing.T) {
	var storage atomic.Int64
	ctx, cancel := context.WithCancelCause(context.Background())
	p := Pipeline{
		StageFunc{StageName: "fetch", Fn: func(context.Context, JobMessage, any) (any, error) {
			cancel(lease.ErrLeaseDeadline) // the fence fires while fetch finishes
			return "rows", nil
		}},
		stage("storage", "s3://bucket/key", nil, &storage),
	}
	ref, err := p.Run(ctx, JobMessage{JobID: NewJobID()})
	if storage.Load() != 0 {
		t.Fatalf("storage ran %d times after the fence", storage.Load())
	}
	if ref != "" || !errors.Is(err, context.Canceled) {
		t.Fatalf("ref %q, err %v; want no ref and the context's error", ref, err)
	}
}

// Under a lease whose renewals cannot reach the database, a fetch that
// outlives the lease (and ignores its context) is the last stage to run:
// the fence stops the job before its storage stage.
func TestFencedRunDoesNotStore(t *testing.T) {
	var stores atomic.Int64
	release := make(chan struct{})
	types := NewRegistry()
	if err := types.Register(JobType{Name: "slow", Runner: Pipeline{
		StageFunc{StageName: "fetch", Fn: func(context.Context, JobMessage, any) (any, error) {
			<-release
			return "rows", nil
		}},
		stage("storage", "s3://bucket/key", nil, &stores),
	}}); err != nil {
		t.Fatal(err)
	}
	w := &Worker{Types: types}
	m := JobMessage{JobID: NewJobID(), JobType: "slow", Symbol: "AAPL", Asof: "2026-01-02", RequestedBy: "test"}
	const ttl = 300 * time.Millisecond
	go func() { time.Sleep(2 * ttl); close(release) }()
	err := lease.Keep(context.Background(), ttl, func(context.Context) error { return errors.New("database unreachable") },
		func(ctx context.Context) error {
			_, err := w.execute(ctx, &Job{Msg: m})
			return err
		})
	if !errors.Is(err, lease.ErrStale) {
		t.Fatalf("Keep: %v; want the lease deadline", err)
	}
	if n := stores.Load(); n != 0 {
		t.Fatalf("the fenced run stored %d times", n)
	}
}
