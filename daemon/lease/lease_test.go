package lease

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffFullJitter(t *testing.T) {
	b := Backoff{Base: time.Second, Cap: 30 * time.Second}
	cases := []struct {
		n    int
		ceil time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {5, 16 * time.Second}, {6, 30 * time.Second}, {60, 30 * time.Second}}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			require.Equal(t, tc.ceil, b.Ceiling(tc.n))
			for i := 0; i < 100; i++ {
				d := b.Delay(tc.n)
				require.GreaterOrEqual(t, d, time.Duration(0))
				require.Less(t, d, tc.ceil)
			}
		})
	}
	fixed := Backoff{Base: time.Second, Cap: time.Minute, Rand: func() float64 { return 0.5 }}
	require.Equal(t, 2*time.Second, fixed.Delay(3))
}

// TestBackoffLargerHasAFloor: the larger bucket waits in [Ceiling(n),
// Ceiling(n+2)), never below the longest regular wait of the same retry,
// never above Cap, whatever the jitter draws.
func TestBackoffLargerHasAFloor(t *testing.T) {
	for _, tc := range []struct {
		n      int
		r      float64
		lo, hi time.Duration
	}{
		{1, 0, time.Second, time.Second},
		{1, 0.999, time.Second, 4 * time.Second},
		{3, 0, 4 * time.Second, 4 * time.Second},
		{3, 0.5, 10 * time.Second, 10 * time.Second},
		{9, 0, 15 * time.Second, 15 * time.Second},
		{9, 0.999, 29 * time.Second, 30 * time.Second},
	} {
		b := Backoff{Base: time.Second, Cap: 30 * time.Second, Rand: func() float64 { return tc.r }}
		d := b.Larger(tc.n)
		require.GreaterOrEqual(t, d, tc.lo, "n=%d r=%v", tc.n, tc.r)
		require.LessOrEqual(t, d, tc.hi, "n=%d r=%v", tc.n, tc.r)
	}
}

// TestBackoffLargerIsJitteredAtTheCap: retries throttled at the same
// attempt must spread out, also once the ceiling has reached Cap (the
// outbox's 429s after a few hours); otherwise they all come back after
// exactly Cap, together. Below the cap the bucket is [Ceiling(n),
// Ceiling(n+2)); at it, [Cap/2, Cap).
func TestBackoffLargerIsJitteredAtTheCap(t *testing.T) {
	b := Backoff{Base: 5 * time.Second, Cap: time.Hour}
	for _, tc := range []struct {
		n      int
		lo, hi time.Duration
	}{
		{1, 5 * time.Second, 20 * time.Second},
		{8, 640 * time.Second, time.Hour}, // Ceiling(n+2) capped
		{11, time.Hour / 2, time.Hour},    // Ceiling(n) is the cap
		{200, time.Hour / 2, time.Hour},
	} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			seen := map[time.Duration]bool{}
			for range 200 {
				d := b.Larger(tc.n)
				require.GreaterOrEqual(t, d, tc.lo)
				require.Less(t, d, tc.hi)
				seen[d] = true
			}
			require.Greater(t, len(seen), 100, "200 waits drawn, %d distinct", len(seen))
		})
	}
}

var machine = Transitions{
	Machine:  "test",
	Terminal: []string{"done"},
	Allowed:  map[string][]string{"queued": {"running"}, "running": {"done", "queued"}},
}

func TestTransitions(t *testing.T) {
	require.NoError(t, machine.Check("queued", "running"))
	err := machine.Check("done", "running")
	require.ErrorIs(t, err, ErrInvalidTransition)
	var te *TransitionError
	require.ErrorAs(t, err, &te)
	require.Contains(t, err.Error(), "done -> running")
	require.True(t, machine.IsTerminal("done"))
	require.False(t, machine.IsTerminal("queued"))
	require.Equal(t, []string{"done", "queued", "running"}, machine.States())
	require.Equal(t, []string{"queued"}, machine.Sources("running"))
}

func TestStaleErrorIs(t *testing.T) {
	err := fmt.Errorf("write status: %w", &StaleError{Table: "inbox_jobs", ID: "j", Version: 3})
	require.ErrorIs(t, err, ErrStale)
	require.Contains(t, err.Error(), "claim_version 3")
}

// TestKeepCancelsWorkWhenStale: a renewal that finds the claim stale
// cancels the work at once, and Keep returns that renewal's error. The
// claim's lease is long and its first beat due at once, so the fence (and
// its ErrLeaseDeadline, also an ErrStale) is forty seconds off: only the
// stale answer can have stopped the work before the work gives up on its
// own.
func TestKeepCancelsWorkWhenStale(t *testing.T) {
	const ttl = time.Minute
	var beats atomic.Int32
	stale := &StaleError{Table: "t", ID: "1", Version: 1}
	start := time.Now()
	err := Keep(context.Background(), ttl, func(context.Context) error {
		beats.Add(1)
		return stale
	}, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("work not cancelled by the stale renewal")
		}
	}, Until(start.Add(ttl-HeartbeatInterval(ttl))))
	require.ErrorIs(t, err, ErrStale)
	require.NotErrorIs(t, err, ErrLeaseDeadline, "stopped by the fence, not the stale renewal")
	var se *StaleError
	require.ErrorAs(t, err, &se)
	require.Same(t, stale, se)
	require.Equal(t, int32(1), beats.Load())
}

func TestKeepSurvivesTransientRenewErrors(t *testing.T) {
	var beats atomic.Int32
	// Beats at a third and two thirds of the lease; the work ends after the
	// second failed one, a third of the lease before the fence, which
	// leaves a loaded machine a second of slack. Cancelled by the first
	// transient error, the work ends after one beat.
	err := Keep(context.Background(), 3*time.Second, func(context.Context) error {
		beats.Add(1)
		return errors.New("database busy")
	}, func(ctx context.Context) error {
		for beats.Load() < 2 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		return ctx.Err()
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, beats.Load(), int32(2))
}

// TestKeepFencesItselfWithoutRenewal: when no renewal succeeds for a whole
// TTL (the database unreachable, or renewals hanging), the work is
// cancelled on the local clock with ErrLeaseDeadline (an ErrStale), not
// left running past the lease's end in the database. The TTL is long
// enough that half of it is left to a slow machine as slack, while work
// fenced a TTL late, or not at all (it gives up on its own after a
// minute), misses the bound; and the renewals tried, counted, show the
// fence came within a TTL of the last one that succeeded, whatever the
// machine's speed: they are a beat apart, none goes out once the work is
// cancelled, and one failing past the lease's end cancels it.
func TestKeepFencesItselfWithoutRenewal(t *testing.T) {
	const ttl = 3 * time.Second
	iv := HeartbeatInterval(ttl)
	failing := func(n *atomic.Int32, ok int32) func(context.Context) error {
		return func(context.Context) error {
			if n.Add(1) <= ok {
				return nil
			}
			return errors.New("database unreachable")
		}
	}
	for _, tc := range []struct {
		name string
		// renew counts its calls in n.
		renew func(n *atomic.Int32) func(ctx context.Context) error
		// most is the most renewals a fence on time lets be tried: the
		// success, if any, then one a beat apart while the lease lasts
		// (a TTL after the success, or after Keep's start, the first a
		// beat in), ttl/iv-1 of them, and one past its end.
		most int32
	}{
		{"renewals fail", func(n *atomic.Int32) func(context.Context) error { return failing(n, 0) }, int32(ttl / iv)},
		{"renewals hang", func(n *atomic.Int32) func(context.Context) error {
			return func(ctx context.Context) error { n.Add(1); <-ctx.Done(); return ctx.Err() }
		}, 1},
		{"one renewal, then failures", func(n *atomic.Int32) func(context.Context) error { return failing(n, 1) }, 1 + int32(ttl/iv)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var renewals atomic.Int32
			start := time.Now()
			var stopped time.Duration
			err := Keep(context.Background(), ttl, tc.renew(&renewals), func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					stopped = time.Since(start)
					return ctx.Err()
				case <-time.After(time.Minute):
					return errors.New("work ran on past its lease")
				}
			})
			require.ErrorIs(t, err, ErrLeaseDeadline)
			require.ErrorIs(t, err, ErrStale)
			// At most a TTL after the last successful renewal (one beat in
			// for the third case), with half a TTL of scheduling slack.
			require.Less(t, stopped, ttl+iv+ttl/2)
			require.LessOrEqual(t, renewals.Load(), tc.most, "renewals tried after the lease's end")
		})
	}
}

// A beat that lands between the work's final commit and its return sees the
// row finished (stale); the work did complete, so Keep reports success.
func TestKeepWorkSucceededDespiteLateStaleBeat(t *testing.T) {
	staleSeen := make(chan struct{})
	var once atomic.Bool
	// The first beat a second in, the fence two seconds after it: the
	// beat, not the fence, ends the work however busy the machine.
	err := Keep(context.Background(), 3*time.Second, func(context.Context) error {
		if once.CompareAndSwap(false, true) {
			defer close(staleSeen)
		}
		return &StaleError{Table: "t", ID: "1", Version: 1}
	}, func(ctx context.Context) error {
		// The final write already committed; the heartbeat fires before
		// the work returns.
		select {
		case <-staleSeen:
		case <-time.After(10 * time.Second):
			return errors.New("no beat")
		}
		<-ctx.Done()
		return nil
	})
	require.NoError(t, err)
}

func TestKeepReportsRenewErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		renewErr error
		reported bool
	}{
		{"transient error reported", errors.New("database unreachable"), true},
		{"stale not reported", &StaleError{Table: "t", ID: "1", Version: 1}, false},
		{"success not reported", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var reports atomic.Int32
			var last atomic.Value
			beat := make(chan struct{}, 1)
			// Beats a second apart, the fence a second after the second:
			// a report is made while the work still runs.
			err := Keep(context.Background(), 3*time.Second, func(context.Context) error {
				select {
				case beat <- struct{}{}:
				default:
				}
				return tc.renewErr
			}, func(ctx context.Context) error {
				// The second beat is tried once the first one's answer
				// was handled, reported or not. A stale answer ends the
				// work before it.
				for range 2 {
					select {
					case <-beat:
					case <-ctx.Done():
						return nil
					case <-time.After(10 * time.Second):
						return errors.New("no beat")
					}
				}
				return nil
			}, OnRenewError(func(err error) {
				reports.Add(1)
				last.Store(err)
			}))
			require.NoError(t, err)
			if !tc.reported {
				require.Zero(t, reports.Load())
				return
			}
			require.GreaterOrEqual(t, reports.Load(), int32(1))
			require.ErrorIs(t, last.Load().(error), tc.renewErr)
		})
	}
}

// TestKeepFencesItselfWhileARenewalIgnoresItsDeadline: a renewal may block
// past the deadline Keep gives it (a database clock measurement or the
// SQLite writer's mutex do not watch the context). The work must still be
// cancelled a TTL after the last renewal, not when the renewal returns:
// another pod may have reclaimed the row by then.
func TestKeepFencesItselfWhileARenewalIgnoresItsDeadline(t *testing.T) {
	const ttl = 300 * time.Millisecond
	release := make(chan struct{})
	var released atomic.Bool
	unblock := func() {
		if released.CompareAndSwap(false, true) {
			close(release)
		}
	}
	defer unblock()
	start := time.Now()
	var stopped time.Duration
	err := Keep(context.Background(), ttl, func(context.Context) error {
		<-release
		return nil
	}, func(ctx context.Context) error {
		defer unblock()
		select {
		case <-ctx.Done():
			stopped = time.Since(start)
			return ctx.Err()
		case <-time.After(3 * time.Second):
			return errors.New("work ran on past its lease")
		}
	})
	require.ErrorIs(t, err, ErrLeaseDeadline)
	require.Less(t, stopped, ttl+time.Second, "unfenced, the work runs 3 s")
}

// TestKeepRunsNoWorkPastTheClaimsLease: a claim whose lease is already over
// when Keep is called may have been reclaimed; the work must not start.
func TestKeepRunsNoWorkPastTheClaimsLease(t *testing.T) {
	var ran, renewed atomic.Bool
	err := Keep(context.Background(), time.Minute, func(context.Context) error {
		renewed.Store(true)
		return nil
	}, func(context.Context) error {
		ran.Store(true)
		return nil
	}, Until(time.Now().Add(-time.Millisecond)))
	require.ErrorIs(t, err, ErrLeaseDeadline)
	require.False(t, ran.Load(), "work ran")
	require.False(t, renewed.Load(), "renewed")
}
