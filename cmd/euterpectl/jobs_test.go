package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/gateway"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

func startGateway(t *testing.T) (string, *jobs.Store) {
	url, store, _ := startCountingGateway(t)
	return url, store
}

// startCountingGateway is startGateway that also counts the event streams
// (GET /v1/jobs/{id}/events) it was asked for: how often a command opened
// a stream, whatever the time it took.
func startCountingGateway(t *testing.T) (string, *jobs.Store, *atomic.Int64) {
	var streams atomic.Int64
	url, store := startWatchedGateway(t, func(r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/jobs/") && strings.HasSuffix(r.URL.Path, "/events") {
			streams.Add(1)
		}
	})
	return url, store, &streams
}

// startWatchedGateway is startGateway that shows seen every request as it
// arrives, before the gateway answers it.
func startWatchedGateway(t *testing.T, seen func(*http.Request)) (string, *jobs.Store) {
	rdb, opt := testsvc.Redis(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := jobs.NewStore(rdb)
	gw := gateway.New(log, gateway.DefaultSettings(), store, opt)
	e := daemon.NewEcho(log)
	gw.Mount(e)
	ln, err := daemon.Listen("EUTERPE_TEST_ADDR", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = gw.Run(ctx) }()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen(r)
		e.ServeHTTP(w, r)
	})
	go func() { defer close(done); _ = daemon.ServeUntil(ctx, daemon.NewHTTPServer(h), ln, 2*time.Second) }()
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
			url, store, streams := startCountingGateway(t)
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

			before := streams.Load()
			code, out, errOut = runCtl("jobs", "events", "--server", url, cr.JobID, "--after", terminal.ID)
			assert.Equal(t, tc.code, code, errOut)
			assert.Empty(t, out, "nothing after the terminal event")
			assert.Empty(t, errOut)
			// The stream, and at most the one more that finds the job
			// finished with nothing after the cursor; a stream that ended
			// taken for a broken one would be reopened, after a pause,
			// until the command gave up.
			assert.LessOrEqual(t, streams.Load()-before, int64(2), "no retries of a stream that ended")
		})
	}
}

// cutter is a TCP proxy to target that ends every connection as soon as it
// has passed frames complete Server-Sent Event frames (a blank line each)
// from the server: a network that drops a long stream again and again.
func cutter(t *testing.T, target string, frames int) string {
	url, _ := cutProxy(t, target, frames, false)
	return url
}

// cutProxy is cutter that also counts the connections it accepted. With
// clean, each cut ends the response properly (the last chunk of a chunked
// body) as a server closing the stream would, rather than breaking it
// off mid-body; that needs the cut to fall at the end of a chunk.
func cutProxy(t *testing.T, target string, frames int, clean bool) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns atomic.Int64
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
			conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer in.Close()
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				// A client that goes away ends the connection to the
				// server too, rather than leaving it to the server's idle
				// timeout.
				go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
				buf := make([]byte, 32<<10)
				seen, prev := 0, byte(0)
				for {
					n, err := out.Read(buf)
					for i := 0; i < n; i++ {
						if buf[i] == '\n' && prev == '\n' {
							if seen++; seen == frames {
								_, _ = in.Write(buf[:i+1])
								if clean {
									_, _ = in.Write([]byte("\r\n0\r\n\r\n"))
								}
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
	return "http://" + ln.Addr().String(), &conns
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

func runCtlCtx(ctx context.Context, env map[string]string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := dispatch(ctx, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}, args)
	return code, out.String(), errb.String()
}

// A job id is a UUID (edge streams contract), and it goes into a URL
// path: anything else is a usage error that sends nothing, rather than a
// request to another route ("ID/events" would stream the events, "../x"
// would climb out of /v1/jobs behind a proxy that cleans paths).
func TestJobsRefuseWhatIsNotAJobID(t *testing.T) {
	url, store := startGateway(t)
	worker(t, store, true)
	code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", `{}`, "--follow")
	require.Equal(t, 0, code, errOut)
	var cr struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &cr))

	for _, id := range []string{cr.JobID + "/events", "../" + cr.JobID, "../../healthz", cr.JobID + "?x=1", cr.JobID + "#x",
		"%2e%2e", "not-a-job", "", strings.Repeat("a", 5000)} {
		for _, cmd := range []string{"get", "cancel", "events"} {
			t.Run(cmd+" "+id[:min(len(id), 40)], func(t *testing.T) {
				code, out, errOut := runCtl("jobs", cmd, "--server", url, id)
				assert.Equal(t, 2, code, errOut)
				assert.Empty(t, out)
				assert.Contains(t, errOut, "not a job id")
				assert.Less(t, len(errOut), daemon.MaxMessage+64, "the argument is not echoed whole")
			})
		}
	}
	code, out, errOut = runCtl("jobs", "get", "--server", url, cr.JobID)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"status": "done"`)
}

// --server is where every path is appended: one that cannot take a path
// is a usage error, and a password in it is never printed.
func TestServerURLChecked(t *testing.T) {
	const id = "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d"
	for _, server := range []string{"http://ops:hunter2@127.0.0.1:notaport", "127.0.0.1:8070", "ftp://127.0.0.1:8070",
		"http://127.0.0.1:8070/?x=", "http://127.0.0.1:8070#frag", "http://ops:hunter2@"} {
		t.Run(server, func(t *testing.T) {
			for _, args := range [][]string{
				{"jobs", "get", id, "--server", server},
				{"jobs", "submit", "--task", "chat", "--server", server},
				{"edges", "list", "--server", server, "--token", "eop_t"},
				{"pipeline", "get", id, "--server", server, "--token", "eop_t"},
			} {
				code, out, errOut := runCtl(args...)
				assert.Equal(t, 2, code, "%v: %s", args, errOut)
				assert.Empty(t, out)
				assert.Contains(t, errOut, "--server")
				assert.NotContains(t, errOut, "hunter2")
			}
		})
	}
}

// Waiting to reopen a stream that brought nothing (ended or broken: the
// pause is the same) ends as soon as the command is interrupted, not when
// the pause would have.
func TestFollowPauseEndsOnInterrupt(t *testing.T) {
	// The pause is a minute: a command that waited it out rather than
	// ending on the interrupt would still be waiting when the wait below
	// gives up, however slow the machine.
	defer func(d time.Duration) { followPause = d }(followPause)
	followPause = time.Minute
	status := make(chan struct{}, 1)
	url, _ := startWatchedGateway(t, func(r *http.Request) {
		// The job's status is asked for only once a stream has ended
		// with nothing, just before the pause.
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/jobs/") && !strings.HasSuffix(r.URL.Path, "/events") {
			select {
			case status <- struct{}{}:
			default:
			}
		}
	})
	code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", `{}`)
	require.Equal(t, 0, code, errOut)
	var cr struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &cr))

	// hello only: every stream ends, as a server closing it would, before
	// the job moves, and the command asks whether the job has finished
	// before it pauses
	proxy, _ := cutProxy(t, strings.TrimPrefix(url, "http://"), 1, true)
	// The connection the status came over is kept for the next request;
	// the proxy waits for its connections to end before it closes.
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		code      int
		out, errs string
		at        time.Time
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runCtlCtx(ctx, nil, "jobs", "events", "--server", proxy, cr.JobID)
		done <- result{code, out, errOut, time.Now()}
	}()
	select {
	case <-status: // the first stream broke: the pause is next
	case r := <-done:
		t.Fatalf("jobs events ended (%d) before its first pause: %s", r.code, r.errs)
	}
	canceled := time.Now()
	cancel()
	select {
	case r := <-done:
		assert.Equal(t, 1, r.code, r.errs)
	case <-time.After(20 * time.Second):
		r := <-done
		t.Fatalf("the pause outlived the interrupt: jobs events ended %v after it", r.at.Sub(canceled))
	}
}

// What a server says in an error is echoed at most daemon.MaxMessage
// bytes long, whatever it sent.
func TestServerErrorsAreCapped(t *testing.T) {
	long := strings.Repeat("é", 3000)
	body := `{"error":{"code":"` + strings.Repeat("c", 3000) + `","message":"` + long + `"}}`
	resp := &http.Response{Status: "418 " + strings.Repeat("t", 3000), StatusCode: 418, Body: io.NopCloser(strings.NewReader(body))}
	err := apiErr(resp)
	assert.LessOrEqual(t, len(err.Error()), daemon.MaxMessage+2*80)
	assert.True(t, utf8.ValidString(err.Error()))

	var errb bytes.Buffer
	report(Env{Stderr: &errb}, fmt.Errorf("connecting: %w", errors.New(long)))
	assert.LessOrEqual(t, errb.Len(), len("euterpectl: ")+daemon.MaxMessage+1)
}

// A stream the edge refuses (an unknown or expired job) is not retried:
// the answer would not change.
func TestEventsOfUnknownJobEndAtOnce(t *testing.T) {
	url, _, streams := startCountingGateway(t)
	code, out, errOut := runCtl("jobs", "events", "--server", url, "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d")
	assert.Equal(t, 1, code, errOut)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "not_found")
	assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	assert.Equal(t, int64(1), streams.Load(), "retried")
}

// A password in the server URL of the environment is not printed with
// the flags' defaults (-h, or a flag error).
func TestUsageHidesServerPassword(t *testing.T) {
	env := map[string]string{"EUTERPE_EDGE_URL": "http://ops:hunter2@127.0.0.1:1", "EUTERPE_CENTRAL_URL": "http://ops:hunter2@127.0.0.1:1"}
	for _, args := range [][]string{{"jobs", "get", "-h"}, {"jobs", "submit", "--bogus"}, {"edges", "list", "--bogus"}, {"pipeline", "list", "-h"}} {
		code, out, errOut := runCtlCtx(context.Background(), env, args...)
		want := 2
		if args[len(args)-1] == "-h" {
			want = 0
		}
		assert.Equal(t, want, code, "%v", args)
		assert.Contains(t, errOut, "-server", "%v", args)
		assert.NotContains(t, out+errOut, "hunter2", "%v", args)
	}
}

// -h or --help on any command prints its flags and exits 0, as Go's flag
// package does on its own; a usage error exits 2. webhook verify keeps 2:
// its 0 means "the signature is valid".
func TestHelpExitsZero(t *testing.T) {
	paths := make([]string, 0, len(commands))
	for p := range commands {
		paths = append(paths, p)
	}
	for _, p := range paths {
		if p == "version" {
			continue
		}
		for _, h := range []string{"-h", "--help"} {
			args := append(strings.Fields(p), h)
			code, _, errOut := runCtlCtx(context.Background(), map[string]string{}, args...)
			want := 0
			if p == "webhook verify" {
				want = 2
			}
			assert.Equal(t, want, code, "%v: %s", args, errOut)
			assert.Contains(t, errOut, "Usage of "+p, "%v", args)
		}
		code, _, _ := runCtlCtx(context.Background(), map[string]string{}, append(strings.Fields(p), "--no-such-flag")...)
		assert.Equal(t, 2, code, "%s --no-such-flag", p)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// Output that could not be written (a full disk) makes the command fail,
// whatever it otherwise did.
func TestUnwrittenOutputFails(t *testing.T) {
	url, store := startGateway(t)
	worker(t, store, true)
	code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", `{}`, "--follow")
	require.Equal(t, 0, code, errOut)
	id := out[strings.Index(out, `"job_id":"`)+10:][:36]
	for _, args := range [][]string{{"version"}, {"jobs", "get", "--server", url, id}, {"jobs", "events", "--server", url, id}} {
		var errb bytes.Buffer
		code := dispatch(context.Background(), Env{Stdin: strings.NewReader(""), Stdout: failingWriter{}, Stderr: &errb, Getenv: func(string) string { return "" }}, args)
		assert.Equal(t, 1, code, "%v", args)
		assert.Contains(t, errb.String(), "no space left on device", "%v", args)
	}
}

// A follow whose output cannot be written (a full disk) stops and exits 1
// naming the failed write, rather than waiting on a job that may run for
// hours to print into nothing.
func TestJobFollowStopsWhenOutputCannotBeWritten(t *testing.T) {
	url, store := startGateway(t)
	code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", `{}`)
	require.Equal(t, 0, code, errOut)
	id := out[strings.Index(out, `"job_id":"`)+10:][:36]
	ctx := context.Background()
	_, err := store.SetRunning(ctx, id, "w", nil)
	require.NoError(t, err)
	_, err = store.AppendEvent(ctx, id, "progress", "w", json.RawMessage(`{"n":1}`))
	require.NoError(t, err)

	for _, args := range [][]string{
		{"jobs", "events", "--server", url, id},
		{"jobs", "submit", "--server", url, "--task", "chat", "--payload", `{}`, "--follow"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var errb bytes.Buffer
			code := dispatch(ctx, Env{Stdin: strings.NewReader(""), Stdout: failingWriter{}, Stderr: &errb,
				Getenv: func(string) string { return "" }}, args)
			require.NoError(t, ctx.Err(), "ran on with nowhere to write")
			assert.Equal(t, 1, code)
			assert.Contains(t, errb.String(), "no space left on device")
		})
	}
}
