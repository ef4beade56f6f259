package ingest

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// benchEvents is how many events one run ingests (EUTERPE_BENCH_SYNC_EVENTS
// lowers it for a quick look).
func benchEvents() int {
	if n, err := strconv.Atoi(os.Getenv("EUTERPE_BENCH_SYNC_EVENTS")); err == nil && n > 0 {
		return n
	}
	return 200_000
}

// BenchmarkIngest measures events stored per second through POST
// /sync/v1/batches on a local central: batches of 500 events (gzip,
// signed, verified, one transaction each), sent by 4 edges at once, each
// its own connection. Batches are built and signed before the timer.
func BenchmarkIngest(b *testing.B) {
	const perBatch, edges = 500, 4
	for _, e := range sqltest.Engines {
		b.Run(string(e), func(b *testing.B) {
			db := sqltest.Open(b, e, migrations()...)
			s := startServer(b, db)
			total := benchEvents()
			type edgeLoad struct {
				reqs []signed
			}
			loads := make([]edgeLoad, edges)
			for i := range loads {
				id, secret := s.register(fmt.Sprintf("bench-%d", i))
				now := time.Now()
				for n := 0; n < total/edges/perBatch; n++ {
					types := make([]string, perBatch)
					for k := range types {
						types[k] = "delta"
					}
					types[0], types[1], types[perBatch-1] = "queued", "running", "done"
					bt := wire.Batch{EdgeID: id, SentAt: now, Events: events(id, fmt.Sprintf("job-%d", n), 1700000000000, types...)}
					loads[i].reqs = append(loads[i].reqs, sign(b, bt, secret, now))
				}
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				var wg sync.WaitGroup
				for i := range loads {
					wg.Add(1)
					go func() {
						defer wg.Done()
						client := &http.Client{}
						for _, u := range loads[i].reqs {
							res := s.sendWith(b, client, u)
							if res.status != 200 {
								b.Errorf("batch: %d %s", res.status, res.body)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			el := time.Since(start)
			b.StopTimer()
			stored := count(b, db, `SELECT COUNT(*) FROM edge_events`)
			// The first round stores everything; later rounds (b.N > 1) are
			// resends, all duplicates, and count as work too.
			b.ReportMetric(float64(total*b.N)/el.Seconds(), "events/s")
			b.ReportMetric(float64(stored), "events")
		})
	}
}
