package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// insertEvents writes n events of distinct jobs in one transaction.
func (f *fixture) insertEvents(tb testing.TB, n int, url string) {
	tb.Helper()
	now := time.Now()
	err := f.db.Tx(context.Background(), func(tx *sql.Tx) error {
		st, err := tx.Prepare(f.db.Rebind(`INSERT INTO job_outbox_events
			(event_id, job_id, requester_id, sequence, event_type, status, webhook_url, payload, next_attempt_at, created_at)
			VALUES (?, ?, ?, 1, 'job.status', 'pending', ?, ?, ?, ?)`))
		if err != nil {
			return err
		}
		defer st.Close()
		for range n {
			id := "evt_" + uuid.NewString()
			p, _ := json.Marshal(map[string]any{"event_id": id, "job_id": id, "sequence": 1, "status": "processing", "occurred_at": now.UTC().Format(time.RFC3339Nano)})
			if _, err := st.Exec(id, id, f.req, url, string(p), sqldb.Micros(now), sqldb.Micros(now)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func benchFixture(b *testing.B, e sqldb.Engine) *fixture {
	return newFixture(b, sqltest.Open(b, e, migrationSets...))
}

// BenchmarkDeliveries measures deliveries per second to a local receiver,
// at the default settings and at batch 25 / concurrency 20.
func BenchmarkDeliveries(b *testing.B) {
	settings := []struct {
		name               string
		batch, concurrency int
	}{{"default", 10, 5}, {"batch25-conc20", 25, 20}}
	for _, e := range sqltest.Engines {
		for _, s := range settings {
			b.Run(string(e)+"/"+s.name, func(b *testing.B) {
				f := benchFixture(b, e)
				var got atomic.Int64
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					got.Add(1)
					w.WriteHeader(http.StatusNoContent)
				}))
				defer srv.Close()
				const perRound = 2000
				f.insertEvents(b, perRound*b.N, srv.URL)
				cfg := Defaults()
				cfg.Batch, cfg.Concurrency, cfg.AllowPrivate = s.batch, s.concurrency, true
				d, err := New(cfg, Options{Store: NewStore(f.db, nil), Secrets: &RequesterSecrets{Requesters: requesters.New(f.db, f.keys)}, Worker: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				b.ResetTimer()
				start := time.Now()
				go func() { done <- d.Run(ctx) }()
				want := int64(perRound * b.N)
				for got.Load() < want {
					time.Sleep(2 * time.Millisecond)
				}
				el := time.Since(start)
				b.StopTimer()
				cancel()
				<-done
				b.ReportMetric(float64(want)/el.Seconds(), "deliveries/s")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkCommitToReceipt measures the time from an event's commit to its
// arrival at the receiver at default settings, events committed one by one
// at 200 per second, wake-ups on.
func BenchmarkCommitToReceipt(b *testing.B) {
	for _, e := range sqltest.Engines {
		b.Run(string(e), func(b *testing.B) {
			f := benchFixture(b, e)
			var mu sync.Mutex
			committed := map[string]time.Time{}
			var lat []time.Duration
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				at := time.Now()
				id := r.Header.Get("X-Euterpe-Event-Id")
				mu.Lock()
				if c, ok := committed[id]; ok {
					lat = append(lat, at.Sub(c))
					delete(committed, id)
				}
				mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			}))
			defer srv.Close()
			d, err := New(func() Config { c := Defaults(); c.AllowPrivate = true; return c }(),
				Options{Store: NewStore(f.db, nil), Secrets: &RequesterSecrets{Requesters: requesters.New(f.db, f.keys)}, Worker: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			time.Sleep(200 * time.Millisecond) // LISTEN / watcher in place
			const perRound = 600               // 3 s at 200 events/s
			b.ResetTimer()
			tick := time.NewTicker(5 * time.Millisecond)
			for i := range perRound * b.N {
				<-tick.C
				// Timed from before the insert: the figure includes the
				// commit itself, so it never flatters.
				id := "evt_" + uuid.NewString()
				mu.Lock()
				committed[id] = time.Now()
				mu.Unlock()
				f.addEventID(b, id, "job_"+strconv.Itoa(i), 1, srv.URL)
			}
			tick.Stop()
			deadline := time.Now().Add(30 * time.Second)
			for {
				mu.Lock()
				n := len(lat)
				mu.Unlock()
				if n >= perRound*b.N || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			b.StopTimer()
			cancel()
			<-done
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(lat)
			if len(lat) == 0 {
				b.Fatal("nothing received")
			}
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(len(lat)), "events")
			b.ReportMetric(0, "ns/op")
		})
	}
}
