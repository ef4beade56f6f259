package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// daemonProc is a built euterpe-edge binary running `serve`.
type daemonProc struct {
	cmd  *exec.Cmd
	base string
}

func startBinary(b *testing.B, redisURL string) *daemonProc {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "euterpe-edge")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	addr := freeAddrB(b)
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "EUTERPE_EDGE_ADDR="+addr, "EUTERPE_REDIS_URL="+redisURL,
		"EUTERPE_STATE_DIR="+b.TempDir(), "EUTERPE_LOG_LEVEL=warn")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	d := &daemonProc{cmd: cmd, base: "http://" + addr}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(d.base + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return d
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("daemon did not become ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freeAddrB(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// rssMB reads VmRSS of pid from /proc.
func rssMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return -1
}

func redisURLFor(opt *redis.Options) string {
	return fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB)
}

// BenchmarkIdleRSS: resident memory of a freshly started, idle
// `euterpe-edge serve` (built binary, CGO_ENABLED=0).
func BenchmarkIdleRSS(b *testing.B) {
	_, opt := testsvc.Redis(b)
	d := startBinary(b, redisURLFor(opt))
	time.Sleep(time.Second)
	var rss float64
	for i := 0; i < b.N; i++ {
		rss = rssMB(d.cmd.Process.Pid)
	}
	b.ReportMetric(rss, "idle-rss-MB")
}

// BenchmarkSSEFanout: 1,000 SSE clients watching 100 running jobs on a
// built daemon. Each iteration appends one event to every job; the metrics
// are the daemon's Redis connections (CLIENT LIST), its RSS, and the p99
// delay from XADD to delivery at the clients.
func BenchmarkSSEFanout(b *testing.B) {
	rdb, opt := testsvc.Redis(b)
	d := startBinary(b, redisURLFor(opt))
	ctx := context.Background()
	store := jobs.NewStore(rdb)
	const nJobs, nClients = 100, 1000
	ids := make([]string, nJobs)
	// Jobs are written as a worker elsewhere would leave them (running),
	// without queue entries, so no local worker takes them.
	for i := range ids {
		id := uuid.NewString()
		ids[i] = id
		now := time.Now().UnixMilli()
		if err := rdb.HSet(ctx, jobs.JobKey(id), "job_id", id, "task", "chat", "payload", "{}", "status", jobs.Queued,
			"created_ts", now, "updated_ts", now, "ttl_s", 600, "result", "", "error", "").Err(); err != nil {
			b.Fatal(err)
		}
		rdb.Expire(ctx, jobs.JobKey(id), 600*time.Second)
		if _, err := store.AppendEvent(ctx, id, jobs.Queued, "gateway.enqueue", nil); err != nil {
			b.Fatal(err)
		}
		if _, err := store.SetRunning(ctx, id, "bench", nil); err != nil {
			b.Fatal(err)
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: nClients, MaxConnsPerHost: nClients}}
	var mu sync.Mutex
	var lat []time.Duration
	var ready, done sync.WaitGroup
	for i := range nClients {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			resp, err := client.Get(d.base + "/v1/jobs/" + ids[i%nJobs] + "/events")
			if err != nil {
				b.Error(err)
				ready.Done()
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			seen := 0
			for sc.Scan() {
				line := sc.Text()
				if !strings.HasPrefix(line, "data: ") {
					continue
				}
				seen++
				if seen == 3 { // hello, queued, running: caught up
					ready.Done()
				}
				var ev jobs.Event
				if json.Unmarshal([]byte(line[6:]), &ev) != nil || ev.Type != "tick" {
					if ev.Type == "canceled" {
						return
					}
					continue
				}
				var p struct{ Sent int64 }
				_ = json.Unmarshal(ev.Data, &p)
				d := time.Since(time.Unix(0, p.Sent))
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	ready.Wait()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, id := range ids {
			data := fmt.Appendf(nil, `{"sent":%d}`, time.Now().UnixNano())
			if _, err := store.AppendEvent(ctx, id, "tick", "bench", data); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.StopTimer()
	conns, total := 0, 0
	for _, line := range strings.Split(rdb.ClientList(ctx).Val(), "\n") {
		if strings.Contains(line, "name=euterpe-edge-gw") {
			conns++
		}
		if strings.Contains(line, "name=euterpe-edge") {
			total++
		}
	}
	rss := rssMB(d.cmd.Process.Pid)
	for _, id := range ids {
		_, _ = store.Cancel(ctx, id, "bench", "end")
	}
	done.Wait()
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	want := b.N * nClients
	if len(lat) != want {
		b.Errorf("delivered %d events, want %d", len(lat), want)
	}
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[(len(lat)-1)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.ReportMetric(float64(conns), "redis-conns")
	b.ReportMetric(float64(total), "redis-conns-all")
	b.ReportMetric(rss, "rss-MB")
}
