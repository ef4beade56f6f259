package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}
}

const benchBody = `{"task":"chat","payload":{"messages":[{"role":"user","content":"hello there"}]}}`

func postJob(c *http.Client, url string) (time.Duration, error) {
	start := time.Now()
	resp, err := c.Post(url, "application/json", bytes.NewReader([]byte(benchBody)))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return 0, &statusError{resp.StatusCode}
	}
	return time.Since(start), nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

// BenchmarkCreateThroughput: jobs accepted per second through HTTP
// POST /v1/jobs (keep-alive clients, 64 concurrent requests).
func BenchmarkCreateThroughput(b *testing.B) {
	set := testSettings()
	set.BacklogLimit = 10_000_000
	set.BacklogInterval = 100 * time.Millisecond
	s := startServer(b, set)
	c := benchClient()
	url := s.URL + "/v1/jobs"
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := postJob(c, url); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkEnqueueLatencyPaced: POST /v1/jobs latency at a paced 500
// requests per second (open loop: each request starts on schedule).
func BenchmarkEnqueueLatencyPaced(b *testing.B) {
	set := testSettings()
	set.BacklogLimit = 10_000_000
	set.BacklogInterval = 100 * time.Millisecond
	s := startServer(b, set)
	c := benchClient()
	url := s.URL + "/v1/jobs"
	for range 50 { // warm the connection pool
		_, _ = postJob(c, url)
	}
	const interval = 2 * time.Millisecond
	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := postJob(c, url)
			if err != nil {
				b.Error(err)
			}
			lat[i] = d
		}()
	}
	wg.Wait()
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}
