package ship

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/edge/worker"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/spool"
)

func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// receiverChildEnv makes the test binary a stand-in receiver process (its
// value is the secret): it prints its URL, serves until stdin closes. The
// burn-down benchmark keeps the receiver's work out of the edge's process,
// as central's is on a real deployment.
const receiverChildEnv = "EUTERPE_SHIP_TEST_RECEIVER"

func runReceiverChild(secret string) {
	rc := shiptest.Start([]byte(secret))
	rc.CountOnly = true
	fmt.Println(rc.URL)
	_, _ = io.Copy(io.Discard, os.Stdin)
	rc.Close()
}

// receiverProcess starts a receiver child and returns its URL and a count
// of the events it received.
func receiverProcess(b *testing.B, secret string) (string, func() int) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), receiverChildEnv+"="+secret)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	url := strings.TrimSpace(line)
	return url, func() int {
		resp, err := http.Get(url + shiptest.CountPath)
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		n, _ := strconv.Atoi(string(body))
		return n
	}
}

// cpuTime is the CPU time (user + system) this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSpoolDrain: a week offline at 50 events a minute is 500,000
// events (EUTERPE_BENCH_SYNC_EVENTS). They are written through the real
// capturing scripts into Redis, moved into the spool (timed: move-events/s),
// then shipped to a local receiver that verifies every batch as central
// does (timed: drain-s, drain-events/s). Events are a mix of a job's
// lifecycle and ~100-byte deltas.
func BenchmarkSpoolDrain(b *testing.B) {
	n := benchEnv("EUTERPE_BENCH_SYNC_EVENTS", 500_000)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rdb, _ := testsvc.Redis(b)
		st := jobs.NewStore(rdb)
		st.Capture = jobs.CaptureStream
		// 1 queued + 1 running + 8 deltas + 1 done = 11 events per job,
		// written from 16 writers.
		jobsN := (n + 10) / 11
		var next atomic.Int64
		errs := make(chan error, 16)
		for w := 0; w < 16; w++ {
			go func() {
				for next.Add(1) <= int64(jobsN) {
					c, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 3600})
					if err == nil {
						_, err = st.SetRunning(ctx, c.ID, "worker.start", nil)
					}
					for d := 0; d < 8 && err == nil; d++ {
						_, err = st.AppendEvent(ctx, c.ID, "delta", "worker.delta", json.RawMessage(`{"text":"some streamed tokens of an answer, about one hundred bytes of text in all.."}`))
					}
					if err == nil {
						_, err = st.Finish(ctx, c.ID, jobs.Done, "worker.finish", json.RawMessage(`{"text":"ok"}`), nil, "")
					}
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for w := 0; w < 16; w++ {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		total := rdb.XLen(ctx, jobs.CaptureStream).Val()
		sp, err := spool.Open(ctx, filepath.Join(b.TempDir(), spool.File), 2<<30)
		if err != nil {
			b.Fatal(err)
		}
		rc := shiptest.NewReceiver(b, []byte("bench-secret"))
		rc.CountOnly = true
		sh, err := New(quiet, rdb, sp, Config{URL: rc.URL, EdgeID: "jetson-bench", Secret: []byte("bench-secret")})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		for {
			k, err := sh.MoveOnce(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if k == 0 {
				break
			}
		}
		moved := time.Since(start)
		start = time.Now()
		for {
			r := sh.SendOnce(ctx)
			if r.Idle {
				break
			}
			if r.Action != actAccepted {
				b.Fatalf("%+v", r)
			}
		}
		drained := time.Since(start)
		b.StopTimer()
		if got := rc.Count(); int64(got) != total {
			b.Fatalf("receiver got %d of %d events", got, total)
		}
		fi, _ := os.Stat(sp.Path())
		_ = sp.Close()
		b.ReportMetric(float64(total)/moved.Seconds(), "move-events/s")
		b.ReportMetric(drained.Seconds(), "drain-s")
		b.ReportMetric(float64(total)/drained.Seconds(), "drain-events/s")
		b.ReportMetric(float64(fi.Size())/(1<<20), "spool-file-MB")
		b.ReportMetric(float64(total), "events")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkBurnDownWithSync: the worker burn-down of EUTERPE_BENCH_JOBS
// jobs (default 20,000; instant backend, 128 workers) three times: sync
// off; capture on alone; capture on with the shipper running (with its
// default yield: one batch a second while the workers are busy) and
// shipping to a receiver in another process. It reports the rates,
// the wall-clock time sync adds (added-%) and the CPU time it adds to this
// process (cpu-added-%; Redis and the receiver run elsewhere).
// EUTERPE_BENCH_YIELD_PACE (a duration; unset is the default pace) sets
// the shipper's YieldPace, so "1h" keeps it from shipping anything while
// the workers are busy and leaves capture's own cost in added-%.
func BenchmarkBurnDownWithSync(b *testing.B) {
	n := benchEnv("EUTERPE_BENCH_JOBS", 20_000)
	var pace time.Duration
	if v := os.Getenv("EUTERPE_BENCH_YIELD_PACE"); v != "" {
		var err error
		if pace, err = time.ParseDuration(v); err != nil {
			b.Fatalf("EUTERPE_BENCH_YIELD_PACE: %v", err)
		}
	}
	ctx := context.Background()
	rdb, _ := testsvc.Redis(b)
	url, received := receiverProcess(b, "bench-secret")
	burn := func(capture, withSync bool) (time.Duration, time.Duration) {
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		st := jobs.NewStore(rdb)
		if capture {
			st.Capture = jobs.CaptureStream
		}
		if err := st.EnsureGroup(ctx); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if _, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{"prompt":"x"}`), TTL: 600}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		var shDone chan error
		before := received()
		if withSync {
			sp, err := spool.Open(ctx, filepath.Join(b.TempDir(), spool.File), 1<<30)
			if err != nil {
				b.Fatal(err)
			}
			defer sp.Close()
			sh, err := New(quiet, rdb, sp, Config{URL: url, EdgeID: "jetson-bench", Secret: []byte("bench-secret"), YieldPace: pace})
			if err != nil {
				b.Fatal(err)
			}
			shDone = make(chan error, 1)
			go func() { shDone <- sh.Run(runCtx) }()
		}
		var ran atomic.Int64
		s := worker.DefaultSettings()
		s.Concurrency, s.Batch = 128, 256
		be := backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
			ran.Add(1)
			return json.RawMessage(`{"ok":true}`), nil
		})
		p, err := worker.New(quiet, rdb, st, "bench", s, backend.NewRegistry(map[string]backend.Backend{"chat": be}))
		if err != nil {
			b.Fatal(err)
		}
		cpu0, start := cpuTime(), time.Now()
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(runCtx) }()
		for ran.Load() < int64(n) || rdb.XPending(ctx, jobs.QueueStream, jobs.Group).Val().Count != 0 {
			time.Sleep(2 * time.Millisecond)
		}
		elapsed := time.Since(start)
		if withSync {
			want := before + 3*n // queued, running, done
			deadline := time.Now().Add(2 * time.Minute)
			for received() < want && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if got := received(); got < want {
				b.Fatalf("shipped %d of %d events", got-before, 3*n)
			}
			b.ReportMetric(time.Since(start).Seconds(), "shipped-all-s")
		}
		cpu := cpuTime() - cpu0 // with sync: the shipping that trails the burn-down included
		stop()
		<-done
		if shDone != nil {
			<-shDone
		}
		return elapsed, cpu
	}
	for i := 0; i < b.N; i++ {
		off, offCPU := burn(false, false)
		capt, _ := burn(true, false)
		on, onCPU := burn(true, true)
		b.ReportMetric(float64(n)/off.Seconds(), "off-jobs/s")
		b.ReportMetric(float64(n)/on.Seconds(), "on-jobs/s")
		b.ReportMetric(100*(capt.Seconds()-off.Seconds())/off.Seconds(), "capture-added-%")
		b.ReportMetric(100*(on.Seconds()-off.Seconds())/off.Seconds(), "added-%")
		b.ReportMetric(100*(onCPU.Seconds()-offCPU.Seconds())/offCPU.Seconds(), "cpu-added-%")
	}
	b.ReportMetric(0, "ns/op")
}
