package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
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

// Words and values jobs submit cannot use are usage errors (exit 2) and
// submit nothing, rather than being dropped: a payload given as a bare
// argument would otherwise go out as the default {}.
func TestSubmitRefusesWhatItCannotUse(t *testing.T) {
	url, store := startGateway(t)
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"payload as an argument", []string{"--task", "chat", `{"prompt":"hi"}`}, `{"prompt":"hi"}`},
		{"argument before the flags", []string{"extra", "--task", "chat"}, "extra"},
		{"negative ttl", []string{"--task", "chat", "--ttl", "-5"}, "--ttl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCtl(append([]string{"jobs", "submit", "--server", url}, tc.args...)...)
			assert.Equal(t, 2, code, errOut)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tc.msg)
			n, err := store.Redis().XLen(context.Background(), jobs.QueueStream).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "nothing submitted")
		})
	}
}

// jobs events resumed with --after from a finished job's terminal event
// (the "id" of the last line a previous run printed) prints nothing more
// and exits at once with the job's outcome: the edge ends such a stream
// straight after hello, which is not a broken stream.
func TestEventsAfterTerminalExitsWithOutcome(t *testing.T) {
	for _, tc := range []struct {
		name   string
		finish bool
		code   int
	}{{"done exits 0", true, 0}, {"canceled exits 1", false, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			url, store := startGateway(t)
			worker(t, store, tc.finish)
			code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", "@-", "--follow")
			require.Equal(t, tc.code, code, errOut)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			var cr struct {
				JobID string `json:"job_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &cr))
			var terminal struct {
				ID string `json:"id"`
			}
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &terminal))
			require.NotEmpty(t, terminal.ID)

			start := time.Now()
			code, out, errOut = runCtl("jobs", "events", "--server", url, cr.JobID, "--after", terminal.ID)
			assert.Equal(t, tc.code, code, errOut)
			assert.Empty(t, out, "nothing after the terminal event")
			assert.Empty(t, errOut)
			assert.Less(t, time.Since(start), time.Second, "no retries of a stream that ended")
		})
	}
}

// cutter is a TCP proxy to target that ends every connection as soon as it
// has passed frames complete Server-Sent Event frames (a blank line each)
// from the server: a network that drops a long stream again and again.
func cutter(t *testing.T, target string, frames int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer in.Close()
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in) }()
				buf := make([]byte, 32<<10)
				seen, prev := 0, byte(0)
				for {
					n, err := out.Read(buf)
					for i := 0; i < n; i++ {
						if buf[i] == '\n' && prev == '\n' {
							if seen++; seen == frames {
								_, _ = in.Write(buf[:i+1])
								return
							}
						}
						prev = buf[i]
					}
					if _, werr := in.Write(buf[:n]); werr != nil || err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// A stream that keeps being cut but moves forward each time is followed
// to its end: every event is printed once, in order, and the exit status
// is the job's outcome, however many cuts it took.
func TestEventsSurviveManyDrops(t *testing.T) {
	for _, tc := range []struct {
		name     string
		progress int
	}{{"a few", 3}, {"more drops than retries", 12}} {
		t.Run(tc.name, func(t *testing.T) {
			url, store := startGateway(t)
			ctx := context.Background()
			code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", `{}`)
			require.Equal(t, 0, code, errOut)
			var cr struct {
				JobID string `json:"job_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &cr))
			_, err := store.SetRunning(ctx, cr.JobID, "w", nil)
			require.NoError(t, err)
			for i := range tc.progress {
				_, err := store.AppendEvent(ctx, cr.JobID, "progress", "w", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)))
				require.NoError(t, err)
			}
			_, err = store.Finish(ctx, cr.JobID, jobs.Done, "w", json.RawMessage(`{}`), nil, "")
			require.NoError(t, err)
			stored, err := store.Events(ctx, cr.JobID, "", 1000)
			require.NoError(t, err)

			// hello and one event per connection
			proxy := cutter(t, strings.TrimPrefix(url, "http://"), 2)
			code, out, errOut = runCtl("jobs", "events", "--server", proxy, cr.JobID)
			require.Equal(t, 0, code, errOut)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				var ev struct {
					ID string `json:"id"`
				}
				require.NoError(t, json.Unmarshal([]byte(l), &ev), l)
				got = append(got, ev.ID)
			}
			var want []string
			for _, ev := range stored {
				want = append(want, ev.ID)
			}
			assert.Equal(t, want, got)
		})
	}
}
