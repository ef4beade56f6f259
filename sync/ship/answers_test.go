package ship

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Whatever answers at the sync URL instead of central — a redirect, a page
// that is not central's result, an answer over 64 KiB (even one that
// starts as central's result), a body that never ends or never stops, a
// 429 without Retry-After — neither deletes the batch nor sets it aside,
// and the sender waits longer after each such answer instead of resending
// at once. Once central answers again, everything ships.
func TestBadAnswersKeepTheBatchAndBackOff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		act   action
		serve func(w http.ResponseWriter, r *http.Request)
	}{
		{"301 to https", actBackoff, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://central.example"+r.URL.Path, http.StatusMovedPermanently)
		}},
		{"200 not JSON", actBackoff, func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("OK"))
		}},
		{"200 huge", actBackoff, func(w http.ResponseWriter, r *http.Request) {
			chunk := []byte(`{"accepted":0,"duplicates":0,"gaps":0,"x":"` + strings.Repeat("y", 1<<20))
			for i := 0; i < 20 && r.Context().Err() == nil; i++ {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}},
		{"200 result past 64 KiB", actBackoff, func(w http.ResponseWriter, r *http.Request) {
			// Counts that match the batch, then more than the sender reads.
			gz, _ := io.ReadAll(r.Body)
			raw, _ := wire.Decompress(gz, wire.MaxBodyBytes)
			b, _ := wire.Decode(raw)
			_, _ = fmt.Fprintf(w, `{"accepted":%d,"duplicates":0,"gaps":%d}`, len(b.Events), len(b.Dropped))
			_, _ = w.Write(bytes.Repeat([]byte(" "), 64<<10))
		}},
		{"200 never ends", actBackoff, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"accepted":`))
			for r.Context().Err() == nil {
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
				if _, err := w.Write([]byte(" ")); err != nil {
					return
				}
			}
		}},
		{"429 without Retry-After", actRetryAfter, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
		}},
		{"502 page", actBackoff, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html>Bad Gateway</html>"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The sender gives up on an answer at its client's timeout;
			// one that did not would wait for a body that never ends for
			// ever, or 30 s with the default client. The bound on each
			// send lies far from both.
			answerTimeout := time.Second
			if tc.act != actBackoff {
				// Timed out on a busy machine, its answer would read as
				// a backoff.
				answerTimeout = 5 * time.Second
			}
			giveUpWithin := 15 * answerTimeout
			h := newHarness(t, 64<<20, func(c *Config) {
				c.BackoffBase, c.BackoffMax = 100*time.Millisecond, 400*time.Millisecond
				c.Rand = func() float64 { return 0.999 }
				c.Client = &http.Client{Timeout: answerTimeout}
			})
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
				if r.URL.Path != wire.BatchPath {
					return false
				}
				tc.serve(w, r)
				return true
			})
			ctx := context.Background()
			want := h.written(h.jobs(2, 1, `{}`))
			_, err := h.sh.MoveOnce(ctx)
			require.NoError(t, err)
			var waits []time.Duration
			for i := 0; i < 4; i++ {
				start := time.Now()
				r := h.sh.SendOnce(ctx)
				assert.Less(t, time.Since(start), giveUpWithin, "the answer is given up on")
				require.Equal(t, tc.act, r.Action, "%+v", r)
				waits = append(waits, r.Wait.Round(10*time.Millisecond))
			}
			assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}, waits)
			st, err := h.sh.Spool().Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(len(want)), st.Events, "the batch is kept")
			assert.Zero(t, st.Quarantined)

			// The drain's batches are central's ordinary answers, however
			// long a slow machine takes over them: the answer timeout was
			// for the sends above.
			cl := *h.sh.cfg.Client
			cl.Timeout = time.Minute
			h.sh.cfg.Client = &cl
			h.rc.SetHook(nil)
			h.drain()
			assert.Equal(t, want, h.rc.Events())
		})
	}
}
