package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Under systemd (neither POD_NAME nor HOSTNAME set) a restarted daemon is
// the same consumer of the group, not one more on every start: three
// daemon processes in turn on one state directory leave one consumer.
func TestRestartKeepsConsumer(t *testing.T) {
	rdb, opt := testsvc.Redis(t)
	ctx := context.Background()
	state := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "EUTERPE_") && k != "POD_NAME" && k != "HOSTNAME" && k != "NOTIFY_SOCKET" && !strings.HasPrefix(k, "WATCHDOG_") {
			env = append(env, kv)
		}
	}
	for life := range 3 {
		addr := freeAddr(t)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(env, serveChildEnv+"=1", "EUTERPE_REDIS_URL="+redisURLFor(opt), "EUTERPE_EDGE_ADDR="+addr,
			"EUTERPE_STATE_DIR="+state, "EUTERPE_LOG_LEVEL=warn", "EUTERPE_WORKER_DRAIN=1s")
		var logs testsvc.LogBuffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		require.NoError(t, cmd.Start())
		var id string
		ok := assert.Eventually(t, func() bool {
			resp, err := http.Post("http://"+addr+"/v1/jobs", "application/json", strings.NewReader(`{"task":"chat","payload":{}}`))
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var cr struct {
				JobID string `json:"job_id"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&cr)
			id = cr.JobID
			return resp.StatusCode == http.StatusAccepted
		}, 10*time.Second, 20*time.Millisecond, "life %d", life)
		ok = ok && assert.Eventually(t, func() bool { // delivered and finished (no backend: error)
			return jobs.IsTerminal(rdb.HGet(ctx, jobs.JobKey(id), "status").Val())
		}, 10*time.Second, 20*time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		require.True(t, ok, "life %d:\n%s", life, logs.String())
		require.NoError(t, err, "life %d:\n%s", life, logs.String())
	}
	var names []string
	for _, c := range rdb.XInfoConsumers(ctx, jobs.QueueStream, jobs.Group).Val() {
		names = append(names, c.Name)
	}
	require.Len(t, names, 1, "consumers after three starts: %v", names)
	b, err := os.ReadFile(filepath.Join(state, daemon.IdentityFile))
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(b)), names[0])
}

// An identity file that is there but cannot be read, or is damaged, stops
// the start (it is not silently replaced by a new consumer) with one line
// that names the setting to look at, and exit status 2: only the operator
// can mend it, so systemd must not restart into the same refusal
// (RestartPreventExitStatus=2).
func TestUnreadableIdentityNamesTheStateDir(t *testing.T) {
	_, opt := testsvc.Redis(t)
	for _, tc := range []struct {
		name  string
		plant func(path string) error
	}{
		{"unreadable", func(path string) error { return os.Mkdir(path, 0o700) }}, // read: EISDIR
		{"corrupt", func(path string) error { return os.WriteFile(path, []byte("\x00\x01 two words\n"), 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			require.NoError(t, tc.plant(filepath.Join(state, daemon.IdentityFile)))
			var stderr strings.Builder
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			code := run(ctx, []string{"serve"}, io.Discard, &stderr, envMap(map[string]string{
				"EUTERPE_REDIS_URL": redisURLFor(opt), "EUTERPE_EDGE_ADDR": "127.0.0.1:0", "EUTERPE_STATE_DIR": state}))
			assert.Equal(t, 2, code, stderr.String())
			last := lastLine(stderr.String())
			assert.True(t, strings.HasPrefix(last, "euterpe-edge: "), "one line of its own: %q", last)
			assert.Contains(t, last, "EUTERPE_STATE_DIR")
			assert.Contains(t, last, state)
			assert.Contains(t, last, daemon.IdentityFile)
		})
	}
}
