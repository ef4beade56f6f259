package pipelinerole

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// BenchmarkSubmitHTTP is POST /v1/pipeline/jobs over real HTTP on
// Postgres: b.N submits of distinct keys from 64 concurrent clients, each
// authenticated by an operator token and committed (create_queued and
// enqueue in one transaction). The worker is not running. It reports
// requests/s and the p99 latency.
func BenchmarkSubmitHTTP(b *testing.B) {
	db := sqltest.Open(b, sqldb.Postgres, sets...)
	s := newServer(b, db, testConfig())
	s.role.Store.Log = slog.New(slog.DiscardHandler)
	s.role.API.Log = s.role.Store.Log
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}}
	const clients = 64
	var next atomic.Int64
	lat := make([][]time.Duration, clients)
	var failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				body := fmt.Sprintf(`{"job_type":"edge_daily","symbol":"edge-%d","asof":"2026-01-%02d"}`, i/28, i%28+1)
				req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/pipeline/jobs", bytes.NewBufferString(body))
				req.Header.Set("Authorization", "Bearer "+s.token)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					failed.Add(1)
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d submits failed", n)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.ReportMetric(0, "ns/op")
}
