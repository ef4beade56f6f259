package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// set_running restamps a job its caller holds running. On a job the caller
// no longer holds running — its failure put it back in the queue, or it
// finished through another copy of the claim — it writes nothing and says
// so: an invalid transition for a job the caller knows is not running, a
// stale claim for a row that left running behind its back.
func TestSetRunningOnlyOnARunningClaim(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		claim := func(t *testing.T, f *fixture, sym string) *Job {
			t.Helper()
			f.submit(t, "noop", sym, "2026-01-02")
			jobs, err := f.store.Claim(ctx, "w1", 1, time.Minute)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("claim: %v %d", err, len(jobs))
			}
			return jobs[0]
		}
		updatedAt := func(t *testing.T, id string) time.Time {
			t.Helper()
			return updatedAtOf(t, db, id)
		}
		for _, tt := range []struct {
			name string
			// leave takes the job out of running; it returns the claim
			// SetRunning is then called with.
			leave func(t *testing.T, f *fixture, j *Job) *Job
			want  error
		}{
			{"retried", func(t *testing.T, f *fixture, j *Job) *Job {
				if out, err := f.store.Fail(ctx, j, Fail(CodeStorageWriteFailed, "disk full")); err != nil || out != OutcomeRetry {
					t.Fatalf("fail: %v %v", out, err)
				}
				return j
			}, lease.ErrInvalidTransition},
			{"final failure", func(t *testing.T, f *fixture, j *Job) *Job {
				if out, err := f.store.Fail(ctx, j, Fail(CodeQualityFailed, "bad")); err != nil || out != OutcomeFailed {
					t.Fatalf("fail: %v %v", out, err)
				}
				return j
			}, lease.ErrInvalidTransition},
			{"succeeded through another copy", func(t *testing.T, f *fixture, j *Job) *Job {
				cp := *j
				if err := f.store.SetSucceeded(ctx, j, time.Now(), "s3://b/k"); err != nil {
					t.Fatal(err)
				}
				return &cp
			}, lease.ErrStale},
			{"retried through another copy", func(t *testing.T, f *fixture, j *Job) *Job {
				cp := *j
				if _, err := f.store.Fail(ctx, j, Fail(CodeStorageWriteFailed, "disk full")); err != nil {
					t.Fatal(err)
				}
				return &cp
			}, lease.ErrStale},
		} {
			t.Run(tt.name, func(t *testing.T) {
				f := newFixture(t, db, nil)
				j := claim(t, f, strings.ReplaceAll(tt.name, " ", "-"))
				held := tt.leave(t, f, j)
				before := updatedAt(t, j.ID)
				err := f.store.SetRunning(ctx, held, before.Add(time.Hour))
				if !errors.Is(err, tt.want) {
					t.Fatalf("SetRunning: %v, want %v", err, tt.want)
				}
				if after := updatedAt(t, j.ID); !after.Equal(before) {
					t.Fatalf("SetRunning wrote the row: updated_at %v -> %v", before, after)
				}
			})
		}
		t.Run("running", func(t *testing.T) {
			f := newFixture(t, db, nil)
			j := claim(t, f, "running")
			at := f.store.Now().Add(time.Second).Truncate(time.Microsecond)
			if err := f.store.SetRunning(ctx, j, at); err != nil {
				t.Fatal(err)
			}
			if got := updatedAt(t, j.ID); !got.Equal(at) {
				t.Fatalf("updated_at %v, want %v", got, at)
			}
		})
	})
}

func updatedAtOf(t *testing.T, db *sqldb.DB, id string) time.Time {
	t.Helper()
	var us int64
	if err := db.QueryRowContext(context.Background(), db.Rebind("SELECT updated_at FROM pipeline_jobs WHERE job_id = ?"), id).Scan(&us); err != nil {
		t.Fatal(err)
	}
	return time.UnixMicro(us).UTC()
}

// create_queued is a producer's entry like Submit: a message its registered
// job type refuses (or of a type not registered) is refused with
// INVALID_MESSAGE and creates no job, instead of a job every worker fails.
func TestCreateQueuedChecksTheJobType(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		if err := f.types.Register(JobType{Name: "edge_like", Runner: Pipeline{stage("storage", "x", nil, nil)},
			Validate: func(m JobMessage) error {
				if strings.ContainsRune(m.Symbol, ' ') {
					return errors.New("symbol must be an edge id")
				}
				return nil
			}}); err != nil {
			t.Fatal(err)
		}
		for _, r := range []Request{
			{JobType: "edge_like", Symbol: "edge a", Asof: "2026-01-02", RequestedBy: "test"},
			{JobType: "unregistered", Symbol: "X", Asof: "2026-01-02", RequestedBy: "test"},
		} {
			m := f.store.Message(r)
			if _, err := f.store.CreateQueued(ctx, m); ErrorCode(err) != CodeInvalidMessage {
				t.Errorf("%s/%s: %v, want INVALID_MESSAGE", r.JobType, r.Symbol, err)
			}
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pipeline_jobs").Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d jobs created (%v)", n, err)
		}
		m := f.store.Message(Request{JobType: "edge_like", Symbol: "edge-b", Asof: "2026-01-02", RequestedBy: "test"})
		if c, err := f.store.CreateQueued(ctx, m); err != nil || !c.Created {
			t.Fatalf("valid message: %+v %v", c, err)
		}
	})
}
