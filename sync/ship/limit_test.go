package ship

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// proxyLimit answers, as nginx's client_max_body_size does, 413 with an
// HTML page (not central's error body) to every batch whose body is over
// limit bytes; it counts the refusals.
func proxyLimit(h *harness, limit *atomic.Int64, refused *atomic.Int32) {
	h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if r.URL.Path != wire.BatchPath || r.ContentLength <= limit.Load() {
			return false
		}
		refused.Add(1)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = w.Write([]byte("<html><head><title>413 Request Entity Too Large</title></head><body>nginx</body></html>"))
		return true
	})
}

// A reverse proxy's body limit below the edge's batch size refuses full
// batches with a 413 of its own. Central deduplicates by event, so the
// batch is split until its parts pass, and the size the proxy refused is
// remembered: later batches are cut below it before they are sent, not
// refused one after the other. Nothing is quarantined.
func TestProxyBodyLimitSplitsBatches(t *testing.T) {
	h := newHarness(t, 64<<20, nil)
	var limit atomic.Int64
	var refused atomic.Int32
	limit.Store(6 << 10)
	proxyLimit(h, &limit, &refused)
	ctx := context.Background()
	var ids []string
	for i := 0; i < 50; i++ {
		ids = append(ids, h.jobs(1, 8, fmt.Sprintf(`{"text":"token %d of a reply long enough to matter"}`, i))...)
	}
	want := h.written(ids)
	h.moveAll()
	for i := 0; ; i++ {
		require.Less(t, i, 200, "shipping stopped behind the proxy's limit: %d refusals", refused.Load())
		r := h.sh.SendOnce(ctx)
		if r.Idle {
			break
		}
		require.NotEqual(t, actQuarantine, r.Action, "%+v", r)
		require.NotEqual(t, actBackoff, r.Action, "%+v", r)
	}
	assert.Equal(t, want, h.rc.Events())
	assert.Zero(t, h.sh.Quarantined())
	assert.LessOrEqual(t, refused.Load(), int32(5), "the refused size is remembered, not met again and again")
}

// The body limit learnt from a proxy's 413 is kept for an hour: batches
// stay below it. Past the hour it is forgotten and batches grow back
// towards full size: a limit still in place is met again (and learnt
// again), a limit raised meanwhile lets full batches through.
func TestProxyBodyLimitIsForgottenAfterAnHour(t *testing.T) {
	for _, raise := range []bool{false, true} {
		t.Run(fmt.Sprintf("raised %v", raise), func(t *testing.T) {
			h := newHarness(t, 64<<20, nil)
			var limit atomic.Int64
			var refused atomic.Int32
			limit.Store(6 << 10)
			proxyLimit(h, &limit, &refused)
			ctx := context.Background()
			ship := func(jobs int) (largest int) {
				t.Helper()
				var ids []string
				for i := 0; i < jobs; i++ {
					ids = append(ids, h.jobs(1, 8, fmt.Sprintf(`{"text":"token %d of a reply long enough to matter"}`, i))...)
				}
				want := h.written(ids)
				h.moveAll()
				for i := 0; ; i++ {
					require.Less(t, i, 200)
					r := h.sh.SendOnce(ctx)
					if r.Idle {
						break
					}
					require.NotEqual(t, actBackoff, r.Action, "%+v", r)
					if r.Action == actAccepted {
						largest = max(largest, r.Events+r.Gaps)
					}
				}
				got := h.rc.Events()
				for id := range want {
					require.Contains(t, got, id)
				}
				return largest
			}
			// Learnt from the sizes refused, from above: a round with no
			// refusal has the batches settled below it.
			var largest int
			for i, before := 0, int32(-1); refused.Load() != before; i++ {
				require.Less(t, i, 6, "refused again and again within the hour")
				before = refused.Load()
				largest = ship(50)
			}
			learnt := refused.Load()
			require.Positive(t, learnt)
			require.Positive(t, h.sh.state.bodyLimit)
			require.Less(t, largest, wire.MaxEvents, "within the hour batches stay below the limit")

			if raise {
				limit.Store(1 << 30)
			}
			h.sh.state.limitAt = h.sh.state.limitAt.Add(-time.Hour - time.Minute)
			largest = ship(100)
			if raise {
				assert.Equal(t, learnt, refused.Load(), "nothing refused")
				assert.Equal(t, wire.MaxEvents, largest, "batches grew back to full size")
				assert.Zero(t, h.sh.state.bodyLimit)
			} else {
				assert.Greater(t, refused.Load(), learnt, "the limit was tried again")
				assert.Positive(t, h.sh.state.bodyLimit, "and learnt again")
			}
			assert.Zero(t, h.sh.Quarantined())
		})
	}
}

// One event alone over a proxy's limit is not central's verdict on it:
// raising the limit lets it through. It is kept, and the sender backs off
// and says once, at error level, what refused which size; once the limit
// is raised everything ships.
func TestProxyRefusingOneEventBacksOffAndSaysWhy(t *testing.T) {
	h := newHarness(t, 64<<20, nil)
	var limit atomic.Int64
	var refused atomic.Int32
	limit.Store(200)
	proxyLimit(h, &limit, &refused)
	ctx := context.Background()
	want := h.written(h.jobs(2, 1, `{}`))
	_, err := h.sh.MoveOnce(ctx)
	require.NoError(t, err)
	var backoffs int
	for i := 0; backoffs < 4; i++ {
		require.Less(t, i, 50)
		r := h.sh.SendOnce(ctx)
		require.NotEqual(t, actQuarantine, r.Action, "%+v", r)
		if r.Action == actBackoff {
			backoffs++
			require.Error(t, r.Err)
			assert.Equal(t, 1, r.Events+r.Gaps, "split down to one event")
			assert.Positive(t, r.Wait)
		}
	}
	assert.Zero(t, h.sh.Quarantined())
	assert.Equal(t, 1, strings.Count(h.logs.String(), "level=ERROR msg=\"sync: something in front of central refuses"), "logged once:\n%s", h.logs)
	assert.Regexp(t, `body of \d+ bytes`, h.logs.String(), "the log names the size refused")

	limit.Store(1 << 30)
	h.drain()
	assert.Equal(t, want, h.rc.Events())
	assert.Zero(t, h.sh.Quarantined())
}

// An uplink too slow to carry a full batch within the client's timeout
// (a weak cellular link) would time out on the same batch for ever. A
// timed-out batch is halved for the next attempt, so smaller ones get
// through; central deduplicates what a timed-out request did store.
func TestTimedOutBatchesAreHalved(t *testing.T) {
	h := newHarness(t, 64<<20, func(c *Config) {
		c.Client = &http.Client{Timeout: 400 * time.Millisecond}
	})
	var full atomic.Int64
	h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if r.URL.Path == wire.BatchPath {
			// The body arrives at a rate at which the first, full batch
			// takes twice the timeout.
			full.CompareAndSwap(0, r.ContentLength)
			time.Sleep(time.Duration(float64(800*time.Millisecond) * float64(r.ContentLength) / float64(full.Load())))
		}
		return false
	})
	ctx := context.Background()
	want := h.twentyJobsMoved(ctx)
	for i := 0; ; i++ {
		require.Less(t, i, 15, "the same batch times out again and again")
		if r := h.sh.SendOnce(ctx); r.Idle {
			break
		}
	}
	assert.Equal(t, want, h.rc.Events())
}

// An uplink that carries half a batch within the client's timeout, but
// not a whole one: once a timed-out batch was halved, accepted batches do
// not double back into the size that timed out, so batches do not time
// out one in two, each wasting the timeout and the metered upload. A dead
// link times out too; once it is back and fast, batches grow back to full
// size within a few.
func TestSlowUplinkDoesNotTimeOutEveryOtherBatch(t *testing.T) {
	for _, tc := range []struct {
		name        string
		timeout     time.Duration                               // the client's
		delay       func(n int, size, full int64) time.Duration // the answer's delay to the n-th batch
		maxTimeouts int
		maxAttempts int
	}{
		// A full batch takes 2.4 timeouts to arrive, half of one 1.2, a
		// quarter 0.6: a timeout long enough that the quarter batches
		// still arrive in time, 400 ms to spare, on a loaded machine. Two
		// time out, and two more are room for stalls; growing back into
		// the size that timed out, about one batch in two would (6 or
		// more).
		{"slow uplink", time.Second, func(_ int, size, full int64) time.Duration {
			return time.Duration(2.4 * float64(time.Second) * float64(size) / float64(full))
		}, 4, 25},
		{"outage, then a fast link", time.Second, func(n int, _, _ int64) time.Duration {
			if n <= 4 {
				return 2 * time.Second
			}
			return 0
		}, 5, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 64<<20, func(c *Config) { c.Client = &http.Client{Timeout: tc.timeout} })
			var full atomic.Int64
			var batches atomic.Int32
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
				if r.URL.Path == wire.BatchPath {
					full.CompareAndSwap(0, r.ContentLength)
					time.Sleep(tc.delay(int(batches.Add(1)), r.ContentLength, full.Load()))
				}
				return false
			})
			ctx := context.Background()
			want := h.written(h.jobs(200, 7, `{"text":"token"}`))
			h.moveAll()
			timeouts := 0
			for i := 0; ; i++ {
				require.Less(t, i, tc.maxAttempts, "%d timeouts", timeouts)
				r := h.sh.SendOnce(ctx)
				if r.Idle {
					break
				}
				if r.Action != actAccepted {
					require.True(t, timedOut(r.Err), "%+v", r)
					timeouts++
				}
			}
			assert.LessOrEqual(t, timeouts, tc.maxTimeouts)
			assert.Equal(t, want, h.rc.Events())
		})
	}
}

// A 408 (central's incomplete_body: the body broke off on the way; a
// proxy's body timeout) or a proxy's 504 is a batch that did not arrive in
// time, as a client timeout is: over an uplink too slow for it, the same
// batch would be cut off for ever. It backs off and the next batch is half
// as large, so smaller ones get through.
func TestTimeoutAnswersHalveTheBatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"central incomplete body", http.StatusRequestTimeout, `{"error":{"code":"` + wire.CodeIncompleteBody + `","message":"the body ended before its end"}}`},
		{"proxy body timeout", http.StatusRequestTimeout, "<html><head><title>408 Request Time-out</title></head><body>nginx</body></html>"},
		{"proxy gateway timeout", http.StatusGatewayTimeout, "<html><head><title>504 Gateway Time-out</title></head><body>nginx</body></html>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 64<<20, nil)
			var full atomic.Int64
			var cut atomic.Int32
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
				// The link carries a bit more than half the first,
				// full batch before whatever is in front of central
				// gives up on it.
				if r.URL.Path != wire.BatchPath {
					return false
				}
				full.CompareAndSwap(0, r.ContentLength)
				if r.ContentLength*5 <= full.Load()*3 {
					return false
				}
				cut.Add(1)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
				return true
			})
			ctx := context.Background()
			want := h.twentyJobsMoved(ctx)

			r := h.sh.SendOnce(ctx)
			require.Equal(t, actBackoff, r.Action, "%+v", r)
			assert.Equal(t, tc.status, r.Status)
			assert.Positive(t, r.Wait, "still backs off")
			first := r.Events + r.Gaps
			r = h.sh.SendOnce(ctx)
			require.Equal(t, actAccepted, r.Action, "%+v", r)
			assert.Equal(t, first/2, r.Events+r.Gaps, "the batch after the timeout is half as large")
			for i := 0; ; i++ {
				require.Less(t, i, 15, "the same batch is cut off again and again: %d", cut.Load())
				if r := h.sh.SendOnce(ctx); r.Idle {
					break
				}
			}
			assert.Equal(t, want, h.rc.Events())
		})
	}
}

// twentyJobsMoved writes 20 jobs of eight deltas each, each with a text of
// its own, moves them into the spool and returns the events written.
func (h *harness) twentyJobsMoved(ctx context.Context) map[string]wire.Event {
	h.t.Helper()
	var ids []string
	for i := 0; i < 20; i++ {
		ids = append(ids, h.jobs(1, 8, fmt.Sprintf(`{"text":"token %d"}`, i))...)
	}
	want := h.written(ids)
	_, err := h.sh.MoveOnce(ctx)
	require.NoError(h.t, err)
	return want
}
