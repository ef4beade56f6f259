package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
)

// hwmMB reads VmHWM (peak resident memory) of pid from /proc.
func hwmMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return -1
}

// BenchmarkSyncRSS: the memory the shipper adds to a built `euterpe-edge
// serve`. Two daemons see the same stream of job events (EUTERPE_BENCH_SYNC_EVENTS,
// default 200,000, written through the real scripts as the workers would):
// one with sync off, one with sync on shipping to a local receiver. The
// metric is the difference of their peak RSS once everything is shipped.
func BenchmarkSyncRSS(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("EUTERPE_BENCH_SYNC_EVENTS")); err == nil && v > 0 {
		n = v
	}
	bin := filepath.Join(b.TempDir(), "euterpe-edge")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	secret := filepath.Join(b.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("bench-secret"), 0o600); err != nil {
		b.Fatal(err)
	}
	rc := shiptest.NewReceiver(b, []byte("bench-secret"))
	rc.CountOnly = true
	start := func(redisURL string, extra ...string) *exec.Cmd {
		addr := freeAddrB(b)
		cmd := exec.Command(bin, "serve")
		cmd.Env = append(os.Environ(), append([]string{"EUTERPE_EDGE_ADDR=" + addr, "EUTERPE_REDIS_URL=" + redisURL,
			"EUTERPE_STATE_DIR=" + b.TempDir(), "EUTERPE_LOG_LEVEL=warn"}, extra...)...)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Get("http://" + addr + "/ready")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return cmd
				}
			}
			if time.Now().After(deadline) {
				b.Fatal("daemon did not become ready")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// write puts n events on running jobs (no queue entries, so no worker
	// takes them): 1 running event then deltas, 100 events a job.
	write := func(st *jobs.Store) {
		ctx := context.Background()
		for j := 0; j < n/100; j++ {
			id := fmt.Sprintf("bench-%d", j)
			now := time.Now().UnixMilli()
			st.Redis().HSet(ctx, jobs.JobKey(id), "job_id", id, "task", "chat", "payload", "{}", "status", jobs.Queued,
				"created_ts", now, "updated_ts", now, "ttl_s", 600, "result", "", "error", "")
			if _, err := st.SetRunning(ctx, id, "bench", nil); err != nil {
				b.Fatal(err)
			}
			for d := 0; d < 99; d++ {
				if _, err := st.AppendEvent(ctx, id, "delta", "worker.delta", json.RawMessage(`{"text":"some streamed tokens of an answer, about one hundred bytes of text in all.."}`)); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for i := 0; i < b.N; i++ {
		rOff, oOff := testsvc.Redis(b)
		off := start(redisURLFor(oOff))
		write(jobs.NewStore(rOff))
		time.Sleep(time.Second)
		offMB := hwmMB(off.Process.Pid)

		rOn, oOn := testsvc.Redis(b)
		on := start(redisURLFor(oOn), "EUTERPE_SYNC_URL="+rc.URL, "EUTERPE_SYNC_EDGE_ID=jetson-bench", "EUTERPE_SYNC_SECRET_FILE="+secret)
		st := jobs.NewStore(rOn)
		st.Capture = jobs.CaptureStream // as the daemon's own scripts do with sync on
		began := time.Now()
		write(st)
		deadline := time.Now().Add(5 * time.Minute)
		for rc.Count() < n && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if rc.Count() < n {
			b.Fatalf("shipped %d of %d", rc.Count(), n)
		}
		onMB := hwmMB(on.Process.Pid)
		b.ReportMetric(offMB, "off-peak-rss-MB")
		b.ReportMetric(onMB, "on-peak-rss-MB")
		b.ReportMetric(onMB-offMB, "added-rss-MB")
		b.ReportMetric(time.Since(began).Seconds(), "write-and-ship-s")
	}
	b.ReportMetric(0, "ns/op")
}
