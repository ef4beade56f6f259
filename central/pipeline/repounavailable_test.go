package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// The repo's status writes answer a database they cannot reach as the
// contract's REPO_UNAVAILABLE (§4.3, an *UnavailableError the worker retries
// and the API answers 503), never as a bare driver error: set_running as
// much as set_succeeded, set_failed and set_dead_letter. A handle that was
// closed and a deadline that passed stand in for the unreachable database.
func TestRepoWritesUnavailable(t *testing.T) {
	writes := []struct {
		name  string
		write func(ctx context.Context, s *Store, j *Job) error
	}{
		{"set_running", func(ctx context.Context, s *Store, j *Job) error { return s.SetRunning(ctx, j, time.Now()) }},
		{"set_succeeded", func(ctx context.Context, s *Store, j *Job) error {
			return s.SetSucceeded(ctx, j, time.Now(), "s3://b/k")
		}},
		{"set_failed", func(ctx context.Context, s *Store, j *Job) error {
			return s.SetFailed(ctx, j, time.Now(), Fail(CodeQualityFailed, "bad"), j.Attempt)
		}},
		{"set_dead_letter", func(ctx context.Context, s *Store, j *Job) error {
			return s.SetDeadLetter(ctx, j, time.Now(), Fail(CodeStorageWriteFailed, "disk full"), j.Attempt)
		}},
	}
	outages := []struct {
		name string
		// store returns a store and context whose database cannot be reached.
		store func(t *testing.T, f *fixture) (*Store, context.Context)
	}{
		{"closed handle", func(t *testing.T, f *fixture) (*Store, context.Context) {
			db, err := sqldb.Open(context.Background(), dbURL(t, f.db), "")
			require.NoError(t, err)
			require.NoError(t, db.Close())
			return NewStore(db, f.store.Now), context.Background()
		}},
		{"deadline passed", func(t *testing.T, f *fixture) (*Store, context.Context) {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			t.Cleanup(cancel)
			return f.store, ctx
		}},
	}
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		for _, o := range outages {
			for _, w := range writes {
				t.Run(o.name+"/"+w.name, func(t *testing.T) {
					f := newFixture(t, db, nil)
					c := f.submit(t, "noop", strings.ReplaceAll(o.name+"-"+w.name, " ", "-"), "2026-01-02")
					jobs, err := f.store.Claim(context.Background(), "w1", 1, time.Minute)
					require.NoError(t, err)
					require.Len(t, jobs, 1)
					s, ctx := o.store(t, f)
					err = w.write(ctx, s, jobs[0])
					var ue *UnavailableError
					require.ErrorAs(t, err, &ue)
					require.Equal(t, CodeRepoUnavailable, ue.Code)
					require.NotEmpty(t, ue.Reason)
					require.LessOrEqual(t, len(ue.Error()), 1024)
					require.Equal(t, StatusRunning, f.get(t, c.JobID).Status, "nothing was written")
				})
			}
		}
	})
}
