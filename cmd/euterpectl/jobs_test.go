package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/gateway"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

func startGateway(t *testing.T) (string, *jobs.Store) {
	rdb, opt := testsvc.Redis(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := jobs.NewStore(rdb)
	gw := gateway.New(log, gateway.DefaultSettings(), store, opt)
	e := daemon.NewEcho(log)
	gw.Mount(e)
	ln, err := daemon.Listen("127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = gw.Run(ctx) }()
	go func() { defer close(done); _ = daemon.ServeUntil(ctx, daemon.NewHTTPServer(e), ln, 2*time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String(), store
}

func runCtl(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), Env{Stdin: strings.NewReader(`{"q":1}`), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}, args)
	return code, out.String(), errb.String()
}

// worker finishes or cancels whichever job appears next on the queue.
func worker(t *testing.T, store *jobs.Store, finish bool) {
	go func() {
		ctx := context.Background()
		for range 200 {
			msgs, _ := store.Redis().XRange(ctx, jobs.QueueStream, "-", "+").Result()
			for _, m := range msgs {
				id := m.Values["job_id"].(string)
				if _, err := store.SetRunning(ctx, id, "w", nil); err != nil {
					continue
				}
				if finish {
					_, _ = store.Finish(ctx, id, jobs.Done, "w", json.RawMessage(`{"ok":true}`), nil, "")
				} else {
					_, _ = store.Cancel(ctx, id, "w", "test")
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

func TestJobsSubmitFollow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		finish bool
		code   int
		last   string
	}{{"done exits 0", true, 0, `"type":"done"`}, {"canceled exits 1", false, 1, `"type":"canceled"`}} {
		t.Run(tc.name, func(t *testing.T) {
			url, store := startGateway(t)
			worker(t, store, tc.finish)
			code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", "@-", "--follow")
			assert.Equal(t, tc.code, code, errOut)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.GreaterOrEqual(t, len(lines), 3, out)
			assert.Contains(t, lines[0], `"job_id"`)
			assert.Contains(t, lines[len(lines)-1], tc.last)

			var cr struct {
				JobID string `json:"job_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &cr))
			code, out, _ = runCtl("jobs", "get", cr.JobID, "--server", url)
			assert.Equal(t, 0, code)
			assert.Contains(t, out, cr.JobID)
			code, _, errOut = runCtl("jobs", "cancel", "--server", url, cr.JobID)
			assert.Equal(t, 1, code)
			assert.Contains(t, errOut, "job_finished")
			code, out, _ = runCtl("jobs", "events", "--server", url, cr.JobID)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, out, tc.last)
		})
	}
}

func TestUsageErrors(t *testing.T) {
	code, _, _ := runCtl("jobs", "submit")
	assert.Equal(t, 2, code)
	code, _, _ = runCtl("jobs", "get")
	assert.Equal(t, 2, code)
	code, _, _ = runCtl("bogus")
	assert.Equal(t, 2, code)
	code, out, _ := runCtl("version")
	assert.Equal(t, 0, code)
	assert.Equal(t, daemon.Version+"\n", out)
}
