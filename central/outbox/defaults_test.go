package outbox

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestPollingDefaults: the dispatcher's defaults are contract §12's — a
// poll jittered between 500 ms and 1500 ms, claims of 10 events, at most 25
// configurable, five concurrent sends — whether taken from Defaults or
// from an environment that sets none of them.
func TestPollingDefaults(t *testing.T) {
	var bound Config
	dc := daemon.NewConfig("t", func(string) string { return "" })
	bound.Bind(dc)
	if err := dc.Parse(nil); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]Config{"Defaults": Defaults(), "bound from an empty environment": bound} {
		t.Run(name, func(t *testing.T) {
			for _, c := range []struct {
				setting   string
				got, want any
			}{
				{"EUTERPE_OUTBOX_POLL_MIN", cfg.PollMin, 500 * time.Millisecond},
				{"EUTERPE_OUTBOX_POLL_MAX", cfg.PollMax, 1500 * time.Millisecond},
				{"EUTERPE_OUTBOX_BATCH", cfg.Batch, 10},
				{"EUTERPE_OUTBOX_CONCURRENCY", cfg.Concurrency, 5},
			} {
				if c.got != c.want {
					t.Errorf("%s = %v, want %v", c.setting, c.got, c.want)
				}
			}
		})
	}
	if MaxBatch != 25 {
		t.Errorf("MaxBatch = %d, want 25", MaxBatch)
	}
	for _, v := range []string{"25", "26"} {
		var cfg Config
		dc := daemon.NewConfig("t", func(k string) string { return map[string]string{"EUTERPE_OUTBOX_BATCH": v}[k] })
		cfg.Bind(dc)
		if err := dc.Parse(nil); (err == nil) != (v == "25") {
			t.Errorf("EUTERPE_OUTBOX_BATCH=%s: %v", v, err)
		}
	}
}

// TestPollIntervalJittered: each wait between polls is drawn anew within
// [PollMin, PollMax), so pods that started together drift apart.
func TestPollIntervalJittered(t *testing.T) {
	d, err := New(Defaults(), Options{Store: &Store{}, Secrets: &RequesterSecrets{}, Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for range 2000 {
		w := d.pollInterval()
		if w < 500*time.Millisecond || w >= 1500*time.Millisecond {
			t.Fatalf("poll interval %s outside [500ms, 1500ms)", w)
		}
		lo, hi = min(lo, w), max(hi, w)
	}
	// 2,000 uniform draws all missing the lowest or highest tenth of the
	// range has a probability below 1e-90.
	if lo >= 600*time.Millisecond || hi < 1400*time.Millisecond {
		t.Fatalf("poll intervals span only [%s, %s]: not jittered across the range", lo, hi)
	}
}

// TestSendsInFlightBoundedByConcurrency: a dispatcher has at most
// Concurrency webhook requests open at once, and with more events due than
// that it keeps all of them busy.
func TestSendsInFlightBoundedByConcurrency(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		var mu sync.Mutex
		open, peak := 0, 0
		release := make(chan struct{})
		rc := newReceiver(t, func(int, *http.Request, []byte) int {
			mu.Lock()
			open++
			peak = max(peak, open)
			mu.Unlock()
			<-release
			mu.Lock()
			open--
			mu.Unlock()
			return http.StatusNoContent
		})
		cfg := testConfig()
		cfg.Concurrency = Defaults().Concurrency
		// Held requests must not time out and be retried meanwhile.
		cfg.Timeout, cfg.LeaseTTL = 10*time.Second, 20*time.Second
		ids := make([]string, cfg.Batch+cfg.Concurrency+3) // more than one claim's worth, of distinct jobs
		for i := range ids {
			ids[i] = f.addEvent(t, fmt.Sprintf("job_%d_%s", i, f.req), 1, rc.URL)
		}
		f.start(t, cfg, "w1")
		var once sync.Once
		unblock := func() { once.Do(func() { close(release) }) }
		t.Cleanup(unblock) // before the dispatcher and the receiver stop

		openNow := func() int { mu.Lock(); defer mu.Unlock(); return open }
		waitFor(t, fmt.Sprintf("%d requests open", cfg.Concurrency), 10*time.Second, func() bool { return openNow() >= cfg.Concurrency })
		time.Sleep(10 * cfg.PollMax) // polls and wake-ups come and go; none may open another request
		mu.Lock()
		held := peak
		mu.Unlock()
		unblock()
		for _, id := range ids {
			f.waitStatus(t, id, "delivered")
		}
		mu.Lock()
		overall := peak
		mu.Unlock()
		if held != cfg.Concurrency || overall != cfg.Concurrency {
			t.Fatalf("requests open at once: %d while held, %d overall; want %d", held, overall, cfg.Concurrency)
		}
	})
}
