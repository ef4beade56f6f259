package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

const syncTestSecret = "edge-sync-secret-5d41402abc4b2a76b9719d911017c592"

func secretFile(t *testing.T, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sync.secret")
	require.NoError(t, os.WriteFile(p, []byte(syncTestSecret+"\n"), 0o600))
	require.NoError(t, os.Chmod(p, mode))
	return p
}

func TestSyncSettingsRefused(t *testing.T) {
	base := func(extra map[string]string) map[string]string {
		m := map[string]string{"EUTERPE_EDGE_ADDR": "127.0.0.1:0", "EUTERPE_SYNC_URL": "https://central.example"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	open := secretFile(t, 0o644)
	tests := []struct {
		name    string
		env     map[string]string
		setting string
		says    string
	}{
		{"no edge id", base(map[string]string{"EUTERPE_SYNC_SECRET": syncTestSecret}), "EUTERPE_SYNC_EDGE_ID", "required"},
		{"no secret", base(map[string]string{"EUTERPE_SYNC_EDGE_ID": "jetson-1"}), "EUTERPE_SYNC_SECRET_FILE", "required"},
		{"secret file readable by others", base(map[string]string{"EUTERPE_SYNC_EDGE_ID": "jetson-1", "EUTERPE_SYNC_SECRET_FILE": open}), "EUTERPE_SYNC_SECRET_FILE", "chmod 0600"},
		{"both secrets", base(map[string]string{"EUTERPE_SYNC_EDGE_ID": "jetson-1", "EUTERPE_SYNC_SECRET_FILE": secretFile(t, 0o600), "EUTERPE_SYNC_SECRET": syncTestSecret}), "EUTERPE_SYNC_SECRET", "keep exactly one"},
		{"url with credentials", base(map[string]string{"EUTERPE_SYNC_URL": "https://user:" + syncTestSecret + "@central.example"}), "EUTERPE_SYNC_URL", "credentials"},
		{"not a url", base(map[string]string{"EUTERPE_SYNC_URL": "central.example"}), "EUTERPE_SYNC_URL", "base URL"},
		{"url with a query", base(map[string]string{"EUTERPE_SYNC_URL": "https://central.example/?token=" + syncTestSecret}), "EUTERPE_SYNC_URL", "without a query"},
		{"url with a fragment", base(map[string]string{"EUTERPE_SYNC_URL": "https://central.example/#x"}), "EUTERPE_SYNC_URL", "without a query"},
		{"zero spool", base(map[string]string{"EUTERPE_SYNC_SPOOL_MAX_MB": "0"}), "EUTERPE_SYNC_SPOOL_MAX_MB", ""},
		{"heartbeat", base(map[string]string{"EUTERPE_SYNC_HEARTBEAT": "10ms"}), "EUTERPE_SYNC_HEARTBEAT", ""},
		{"negative yield pace", base(map[string]string{"EUTERPE_SYNC_YIELD_PACE": "-1s"}), "EUTERPE_SYNC_YIELD_PACE", ""},
		{"yield pace over a minute", base(map[string]string{"EUTERPE_SYNC_YIELD_PACE": "2m"}), "EUTERPE_SYNC_YIELD_PACE", ""},
		{"tiny yield ceiling", base(map[string]string{"EUTERPE_SYNC_YIELD_CEILING": "10"}), "EUTERPE_SYNC_YIELD_CEILING", ""},
		{"negative redis cap", base(map[string]string{"EUTERPE_SYNC_REDIS_MAX_EVENTS": "-1"}), "EUTERPE_SYNC_REDIS_MAX_EVENTS", ""},
		{"tiny redis cap", base(map[string]string{"EUTERPE_SYNC_REDIS_MAX_EVENTS": "1"}), "EUTERPE_SYNC_REDIS_MAX_EVENTS", "EUTERPE_SYNC_YIELD_CEILING"},
		{"redis cap not above the yield ceiling", base(map[string]string{"EUTERPE_SYNC_REDIS_MAX_EVENTS": "100000"}), "EUTERPE_SYNC_REDIS_MAX_EVENTS", "EUTERPE_SYNC_YIELD_CEILING"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			code := run(ctx, []string{"serve"}, io.Discard, &stderr, envMap(tt.env))
			assert.Equal(t, 2, code)
			out := strings.TrimSpace(stderr.String())
			assert.NotContains(t, out, "\n", "one line")
			assert.Contains(t, out, tt.setting)
			assert.Contains(t, out, tt.says)
			assert.NotContains(t, out, syncTestSecret)
		})
	}
}

// The Redis cap, unless set, is ten times the yield ceiling: an edge whose
// ceiling was raised past the cap's former fixed default still starts.
func TestSyncRedisCapFollowsTheYieldCeiling(t *testing.T) {
	for _, tc := range []struct {
		ceiling, cap string
		want         int
	}{
		{"", "", 1_000_000},
		{"2000000", "", 20_000_000},
		{"10000000", "", 100_000_000},
		{"", "500000", 500_000},
		{"2000000", "0", 20_000_000},
	} {
		env := map[string]string{"EUTERPE_SYNC_URL": "https://central.example", "EUTERPE_SYNC_EDGE_ID": "jetson-1",
			"EUTERPE_SYNC_SECRET": syncTestSecret, "EUTERPE_SYNC_YIELD_CEILING": tc.ceiling, "EUTERPE_SYNC_REDIS_MAX_EVENTS": tc.cap}
		var s syncSettings
		cfg := daemon.NewConfig("euterpe-edge serve", envMap(env))
		s.register(cfg)
		require.NoError(t, cfg.Parse(nil))
		require.NoError(t, s.validate(), "ceiling %q cap %q", tc.ceiling, tc.cap)
		assert.Equal(t, tc.want, s.RedisMaxEvents, "ceiling %q cap %q", tc.ceiling, tc.cap)
	}
}

// A yield pace of 0 turns yielding off: the shipper's Config says never.
func TestSyncYieldPaceZeroNeverYields(t *testing.T) {
	assert.Less(t, yieldPace(0), time.Duration(0))
	assert.Equal(t, 3*time.Second, yieldPace(3*time.Second))
}

// syncDaemon is `serve` in this process, with its log kept.
type syncDaemon struct {
	base  string
	state string
	logs  *testsvc.LogBuffer
}

func serveSync(t *testing.T, env map[string]string) syncDaemon {
	t.Helper()
	d := syncDaemon{logs: &testsvc.LogBuffer{}, state: t.TempDir()}
	addr := freeAddr(t)
	env["EUTERPE_EDGE_ADDR"] = addr
	env["EUTERPE_STATE_DIR"] = d.state
	env["EUTERPE_LOG_LEVEL"] = "debug"
	env["EUTERPE_TASK_BACKENDS"] = "tool=exec:/bin/cat"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- run(ctx, []string{"serve"}, io.Discard, d.logs, envMap(env)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, 0, code, "%s", d.logs)
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
		assert.NotContains(t, d.logs.String(), syncTestSecret, "the sync secret reached the log")
	})
	d.base = "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(d.base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "%s", d.logs)
	return d
}

// runJobs posts n tool jobs (run by /bin/cat) and waits until all are done.
func runJobs(t *testing.T, base string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		resp, err := http.Post(base+"/v1/jobs", "application/json", strings.NewReader(fmt.Sprintf(`{"task":"tool","payload":{"n":%d}}`, i)))
		require.NoError(t, err)
		var cr struct {
			JobID string `json:"job_id"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&cr))
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		ids[i] = cr.JobID
	}
	for _, id := range ids {
		require.Eventually(t, func() bool {
			resp, err := http.Get(base + "/v1/jobs/" + id)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var j struct {
				Status string `json:"status"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&j)
			return jobs.IsTerminal(j.Status)
		}, 20*time.Second, 20*time.Millisecond)
	}
	return ids
}

// writtenEvents is what the edge's scripts wrote for ids, as central gets it.
func writtenEvents(t *testing.T, rdb *redis.Client, edge string, ids []string) map[string]wire.Event {
	t.Helper()
	out := map[string]wire.Event{}
	for _, id := range ids {
		for _, m := range rdb.XRange(context.Background(), jobs.EventsKey(id), "-", "+").Val() {
			e := jobs.EventFromValues(m.ID, m.Values)
			w := wire.NewEvent(edge, id, m.ID, e.Type, e.Step, e.TS, e.Data)
			w.Task = "tool"
			out[w.EventID] = w
		}
	}
	return out
}

func redisURLOf(opt *redis.Options) string { return fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB) }

// Sync off (EUTERPE_SYNC_URL empty): the edge works as before, no capture
// stream grows, no spool file appears and /metrics has no sync series.
func TestSyncOffCapturesNothing(t *testing.T) {
	rdb, opt := testsvc.Redis(t)
	d := serveSync(t, map[string]string{"EUTERPE_REDIS_URL": redisURLOf(opt)})
	ids := runJobs(t, d.base, 5)
	assert.NotEmpty(t, writtenEvents(t, rdb, "x", ids))
	assert.Zero(t, rdb.Exists(context.Background(), jobs.CaptureStream).Val())
	_, err := os.Stat(filepath.Join(d.state, spool.File))
	assert.True(t, os.IsNotExist(err))
	resp, err := http.Get(d.base + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.NotContains(t, string(body), "euterpe_sync_")
}

// Sync on: every event of the jobs the daemon ran reaches the receiver,
// /metrics shows the sync series, and /ready does not depend on central.
func TestSyncOnShipsEveryEventAndServesMetrics(t *testing.T) {
	rdb, opt := testsvc.Redis(t)
	rc := shiptest.NewReceiver(t, []byte(syncTestSecret))
	d := serveSync(t, map[string]string{"EUTERPE_REDIS_URL": redisURLOf(opt), "EUTERPE_SYNC_URL": rc.URL,
		"EUTERPE_SYNC_EDGE_ID": "jetson-lab-01", "EUTERPE_SYNC_SECRET_FILE": secretFile(t, 0o600), "EUTERPE_SYNC_HEARTBEAT": "1s",
		"EUTERPE_LIBRARY_ROOTS": t.TempDir()})
	ids := runJobs(t, d.base, 10)
	want := writtenEvents(t, rdb, "jetson-lab-01", ids)
	require.Eventually(t, func() bool { return rc.Count() == len(want) }, 20*time.Second, 20*time.Millisecond)
	assert.Equal(t, want, rc.Events())
	require.Eventually(t, func() bool { return len(rc.Statuses()) > 0 }, 5*time.Second, 20*time.Millisecond)
	st := rc.Statuses()[0]
	assert.Equal(t, "jetson-lab-01", st.EdgeID)
	assert.Equal(t, 4, st.Workers)
	assert.NotNil(t, st.Library, "the library has roots: its counts are reported")

	resp, err := http.Get(d.base + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"euterpe_sync_spool_events ", "euterpe_sync_spool_bytes ", "euterpe_sync_spool_oldest_age_seconds ",
		"euterpe_sync_shipped_events_total ", "euterpe_sync_dropped_events_total 0", "euterpe_sync_redis_dropped_total 0", "euterpe_sync_quarantined_batches_total 0"} {
		assert.Contains(t, string(body), m)
	}
	_, err = os.Stat(filepath.Join(d.state, spool.File))
	assert.NoError(t, err)
}

func TestReadyDoesNotWaitForCentral(t *testing.T) {
	_, opt := testsvc.Redis(t)
	d := serveSync(t, map[string]string{"EUTERPE_REDIS_URL": redisURLOf(opt), "EUTERPE_SYNC_URL": "http://" + freeAddr(t),
		"EUTERPE_SYNC_EDGE_ID": "jetson-1", "EUTERPE_SYNC_SECRET": syncTestSecret})
	runJobs(t, d.base, 2)
	resp, err := http.Get(d.base + "/ready")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// A real edge process is SIGKILLed while a batch is in flight (the
// receiver holds the request); started again on the same state directory
// and Redis, it ships every event: nothing is lost.
func TestSIGKILLMidBatchLosesNothing(t *testing.T) {
	rdb, opt := testsvc.Redis(t)
	rc := shiptest.NewReceiver(t, []byte(syncTestSecret))
	inFlight := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	rc.SetHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if r.URL.Path != wire.BatchPath {
			return false
		}
		once.Do(func() { close(inFlight) })
		select { // hold every batch until the edge is dead
		case <-release:
		case <-r.Context().Done():
		}
		shiptest.Refuse(w, http.StatusServiceUnavailable, "unavailable")
		return true
	})
	state := t.TempDir()
	addr := freeAddr(t)
	start := func() (*exec.Cmd, *testsvc.LogBuffer) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		var env []string
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "EUTERPE_") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, serveChildEnv+"=1", "EUTERPE_REDIS_URL="+redisURLOf(opt), "EUTERPE_EDGE_ADDR="+addr,
			"EUTERPE_STATE_DIR="+state, "EUTERPE_TASK_BACKENDS=tool=exec:/bin/cat", "EUTERPE_LOG_LEVEL=debug",
			"EUTERPE_SYNC_URL="+rc.URL, "EUTERPE_SYNC_EDGE_ID=jetson-1", "EUTERPE_SYNC_SECRET_FILE="+secretFile(t, 0o600),
			"EUTERPE_SYNC_BACKOFF_MAX=1s")
		logs := &testsvc.LogBuffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		require.Eventually(t, func() bool {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		}, 20*time.Second, 20*time.Millisecond)
		return cmd, logs
	}

	cmd, logs1 := start()
	ids := runJobs(t, "http://"+addr, 30)
	select {
	case <-inFlight:
	case <-time.After(20 * time.Second):
		t.Fatal("no batch was sent")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	close(release)
	rc.SetHook(nil)
	assert.Zero(t, rc.Count(), "nothing was accepted before the kill")

	_, logs2 := start()
	want := writtenEvents(t, rdb, "jetson-1", ids)
	require.Eventually(t, func() bool { return rc.Count() == len(want) }, 30*time.Second, 50*time.Millisecond, "%d of %d", rc.Count(), len(want))
	assert.Equal(t, want, rc.Events())
	for _, l := range []*testsvc.LogBuffer{logs1, logs2} {
		assert.NotContains(t, l.String(), syncTestSecret)
	}
}
