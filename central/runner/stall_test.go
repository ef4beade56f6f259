package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon"
)

// hungFFmpeg writes a program standing in for ffmpeg: it answers -version,
// and otherwise reports one progress block, records its pid, then hangs
// without another word.
func hungFFmpeg(t *testing.T) (program, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	program, pidFile = filepath.Join(dir, "ffmpeg"), filepath.Join(dir, "pid")
	script := "#!/bin/sh\n" + answersVersion +
		"printf 'out_time_us=1000000\\ntotal_size=4096\\nprogress=continue\\n'\n" +
		"echo $$ > " + pidFile + "\n" +
		"exec sleep 300\n"
	if err := os.WriteFile(program, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return program, pidFile
}

// TestStalledTranscode: an ffmpeg that stops reporting progress no longer
// feeds the lease. After the stall timeout the runner stops renewing, kills
// it and records a retryable transcode_stalled failure: the job is back in
// queued with backoff and its attempt counted, instead of being held
// forever by a timer-driven heartbeat. The stall is seen within a
// heartbeat, before the lease it no longer renews runs out, also when a
// quarter of the stall timeout is longer than the lease (fails without,
// for that case: the lease ran out first, the attempt was abandoned as a
// lost lease and the job stayed processing).
func TestStalledTranscode(t *testing.T) {
	cases := []struct {
		name       string
		ttl, stall time.Duration
	}{
		{"stall of a few leases", 300 * time.Millisecond, time.Second},
		{"stall of many leases", 600 * time.Millisecond, 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachEngine(t, func(t *testing.T, e *env) { stalledTranscode(t, e, tc.ttl, tc.stall) })
		})
	}
}

func stalledTranscode(t *testing.T, e *env, ttl, stall time.Duration) {
	program, pidFile := hungFFmpeg(t)
	e.putWAV("in/src.wav", 1)
	id := e.enqueue("in/src.wav", oneOpus, nil)
	r := e.runner(func(s *runner.Settings) {
		s.LeaseTTL = ttl
		s.StallTimeout = stall
		s.FFmpeg = program
	})
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if ok, err := r.RunOnce(ctx); !ok || err != nil {
			t.Errorf("RunOnce: %v %v", ok, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(stall + 5*time.Second):
		status := e.view(id).Status
		cancel() // shut the runner down (kills the stand-in) before failing
		<-done
		t.Fatalf("stalled job still held %v after the stall timeout (status %s)", 5*time.Second, status)
	}
	if d := time.Since(start); d < stall {
		t.Fatalf("attempt ended after %v, before the stall timeout", d)
	}
	v := e.view(id)
	if v.Status != schema.StatusQueued || v.AttemptCount != 1 || v.LastError == nil || v.LastError.Code != "transcode_stalled" ||
		v.NextAttemptAt == nil || v.WorkerID != nil {
		t.Fatalf("after stall: status %s attempts %d err %+v next %v worker %v", v.Status, v.AttemptCount, v.LastError, v.NextAttemptAt, v.WorkerID)
	}
	if got := e.events(id); got[len(got)-1] != schema.StatusQueued {
		t.Fatalf("events %v", got)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the stand-in ffmpeg never ran: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("hung ffmpeg %d still alive (kill 0: %v)", pid, err)
	}
	e.scratchEmpty()
}

// TestStallTimeoutSetting: the stall timeout defaults to max(2×lease TTL,
// 60s) and must be longer than the heartbeat interval.
func TestStallTimeoutSetting(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want time.Duration // 0: a setting error naming EUTERPE_RUNNER_STALL_TIMEOUT
	}{
		{"default", nil, 60 * time.Second},
		{"default follows a long lease", map[string]string{"EUTERPE_RUNNER_LEASE_TTL": "45s"}, 90 * time.Second},
		{"explicit", map[string]string{"EUTERPE_RUNNER_STALL_TIMEOUT": "2m"}, 2 * time.Minute},
		{"just over the heartbeat", map[string]string{"EUTERPE_RUNNER_LEASE_TTL": "3s", "EUTERPE_RUNNER_STALL_TIMEOUT": "1001ms"}, 1001 * time.Millisecond},
		{"equal to the heartbeat", map[string]string{"EUTERPE_RUNNER_LEASE_TTL": "3s", "EUTERPE_RUNNER_STALL_TIMEOUT": "1s"}, 0},
		{"under the heartbeat", map[string]string{"EUTERPE_RUNNER_STALL_TIMEOUT": "5s"}, 0},
		{"negative", map[string]string{"EUTERPE_RUNNER_STALL_TIMEOUT": "-1s"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := daemon.NewConfig("test", func(k string) string { return tc.env[k] })
			s := runner.Bind(c)
			err := c.Parse(nil)
			if tc.want == 0 {
				var se *daemon.SettingError
				if !errors.As(err, &se) || se.Setting != "EUTERPE_RUNNER_STALL_TIMEOUT" {
					t.Fatalf("got %v, want a setting error naming EUTERPE_RUNNER_STALL_TIMEOUT", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Stall(); got != tc.want {
				t.Fatalf("stall timeout %v, want %v", got, tc.want)
			}
		})
	}
	// New refuses the same relation when Settings come from code.
	s := runner.DefaultSettings()
	s.TempDir = t.TempDir()
	s.StallTimeout = s.LeaseTTL / 3
	if _, err := runner.New(runner.Options{Jobs: (*inbox.Store)(nil), Secrets: nilSecrets{}, Settings: s}); err == nil {
		t.Fatal("New accepted a stall timeout equal to the heartbeat interval")
	}
}

// TestWatchdogMonotonicClock: the watchdog measures progress on the
// monotonic clock. A wall-clock reading would turn an NTP step forward into
// a stall of every running attempt, and a step back into a hung ffmpeg
// keeping its lease; only a reading with a monotonic part is immune. With a
// clock the test moves, the stall comes exactly after the timeout and
// progress puts it off.
func TestWatchdogMonotonicClock(t *testing.T) {
	wd := runner.NewWatchdog(time.Minute, time.Now)
	runner.WatchdogTouch(wd)
	// time.Time.String ends with "m=±<seconds>" when the reading is monotonic.
	if s := runner.WatchdogLastProgress(wd).String(); !strings.Contains(s, " m=") {
		t.Fatalf("last progress %s has no monotonic reading: a wall-clock step moves it", s)
	}

	const timeout = 10 * time.Second
	base := time.Now()
	var elapsed time.Duration
	now := func() time.Time { return base.Add(elapsed) }
	wd = runner.NewWatchdog(timeout, now)
	elapsed = timeout
	if runner.WatchdogStalled(wd) {
		t.Fatal("stalled at the timeout, not after it")
	}
	runner.WatchdogTouch(wd)
	elapsed += timeout
	if runner.WatchdogStalled(wd) {
		t.Fatal("stalled although progress came within the timeout")
	}
	elapsed += time.Nanosecond
	if !runner.WatchdogStalled(wd) {
		t.Fatal("not stalled a timeout after the last progress")
	}
	runner.WatchdogTouch(wd)
	if !runner.WatchdogStalled(wd) {
		t.Fatal("a stall was undone by later progress")
	}
}

type nilSecrets struct{}

func (nilSecrets) SigningKeys(context.Context, string) ([][]byte, error) { return nil, nil }
