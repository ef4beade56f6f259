package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/procgroup/proctest"
)

func shell(script string, timeout time.Duration) *Exec {
	return &Exec{Path: "/bin/sh", Args: []string{"-c", script}, Timeout: timeout}
}

func TestExecBackend(t *testing.T) {
	t.Setenv("EUTERPE_LLM_API_KEY", "sk-must-not-leak")
	tests := []struct {
		name   string
		script string
		want   string
		code   string
		status int
	}{
		{"echoes payload", `cat`, `{"q":1}`, "", 0},
		{"sees job env only", `printf '{"job":"%s","task":"%s","key":"%s"}' "$EUTERPE_JOB_ID" "$EUTERPE_TASK" "$EUTERPE_LLM_API_KEY"`, `{"job":"j9","task":"tool","key":""}`, "", 0},
		{"empty output", `cat >/dev/null`, `{}`, "", 0},
		{"exit status and stderr", `echo "bad thing happened" >&2; exit 3`, "", CodeBackendError, 3},
		// A shell's $? for a program killed by a signal: 128 + the signal.
		{"killed by a signal", `echo "bad thing happened" >&2; kill -9 $$`, "", CodeBackendError, 128 + 9},
		{"not json", `echo hello`, "", CodeInvalidResult, 0},
		// JSON lets Latin-1 through inside strings; GET and SSE promise UTF-8.
		{"latin-1 result", `printf '{"text":"caf\351 \377\376"}'`, "{\"text\":\"caf\uFFFD \uFFFD\"}", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := shell(tc.script, 5*time.Second).Run(context.Background(), Request{JobID: "j9", Task: "tool", Payload: json.RawMessage(`{"q":1}`)}, nil)
			if tc.code == "" {
				if err != nil || string(out) != tc.want {
					t.Fatalf("got %s, %v; want %s", out, err, tc.want)
				}
				return
			}
			var be *Error
			if !errors.As(err, &be) || be.Code != tc.code || be.Status != tc.status {
				t.Fatalf("err = %#v, want %s status %d", err, tc.code, tc.status)
			}
			if tc.status != 0 && !strings.Contains(be.Message, "bad thing happened") {
				t.Fatalf("message = %q", be.Message)
			}
			if tc.status > 128 && !strings.Contains(be.Message, "killed") {
				t.Fatalf("message = %q does not name the signal", be.Message)
			}
		})
	}
}

func TestExecLongStderrCapped(t *testing.T) {
	_, err := shell(`head -c 5000 /dev/zero | tr '\0' e >&2; exit 1`, 5*time.Second).Run(context.Background(), Request{Payload: []byte(`{}`)}, nil)
	var be *Error
	if !errors.As(err, &be) || be.Status != 1 || len(be.Message) != 512 {
		t.Fatalf("err = %v (len %d)", err, len(be.Message))
	}
}

// traceback is a shell line printing to stderr a Python traceback of 12
// frames that ends with last, then failing.
func traceback(last string) string {
	var b strings.Builder
	b.WriteString(`printf 'Traceback (most recent call last):\n' >&2; `)
	for i := range 12 {
		fmt.Fprintf(&b, `printf '  File "/opt/tools/rag/pipeline_stage_%d.py", line %d, in handle_request\n    return self.dispatch(payload["messages"])\n' >&2; `, i, 100+i)
	}
	return b.String() + `printf '%s\n' "` + last + `" >&2; exit 1`
}

// TestExecErrorKeepsStderrEnd: the stored error ends with the end of
// stderr — the error a traceback ends with, past the first 512 bytes —
// with a URL's password in it still hidden.
func TestExecErrorKeepsStderrEnd(t *testing.T) {
	cases := []struct {
		name, last, has, hidden string
	}{
		{"traceback", `KeyError: 'messages'`, `KeyError: 'messages'`, ""},
		{"secret in the end", `redis.ConnectionError: redis://:hunter2@cache:6379 refused`, `@cache:6379 refused`, "hunter2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := shell(traceback(tc.last), 5*time.Second).Run(context.Background(), Request{Payload: []byte(`{}`)}, nil)
			var be *Error
			if !errors.As(err, &be) || be.Code != CodeBackendError || be.Status != 1 {
				t.Fatalf("err = %v, want %s status 1", err, CodeBackendError)
			}
			if !strings.HasSuffix(be.Message, tc.has) || len(be.Message) > 512 || !strings.HasPrefix(be.Message, "exec backend: …") {
				t.Fatalf("message = %q (%d bytes), want the end of stderr ending %q", be.Message, len(be.Message), tc.has)
			}
			if tc.hidden != "" && strings.Contains(be.Message, tc.hidden) {
				t.Fatalf("message = %q shows %q", be.Message, tc.hidden)
			}
		})
	}
}

// TestExecStdoutFloodStopped: a program printing past the result limit is
// killed as it passes it and the job fails as a result too large, not
// after the backend timeout as backend_timeout.
func TestExecStdoutFloodStopped(t *testing.T) {
	const timeout = 20 * time.Second
	start := time.Now()
	_, err := shell(`yes`, timeout).Run(context.Background(), Request{Payload: []byte(`{}`)}, nil)
	var be *Error
	if !errors.As(err, &be) || be.Code != CodeInvalidResult || !strings.Contains(be.Message, strconv.Itoa(maxBody)) {
		t.Fatalf("err = %v, want %s naming the %d-byte limit", err, CodeInvalidResult, maxBody)
	}
	if d := time.Since(start); d > timeout/2 {
		t.Fatalf("the flood ran %v", d)
	}
}

// TestExecOutputHeldWarned: a program exiting 0 while a process it put in
// a session of its own holds its stdout is judged by its answer, and the
// survivor, which nothing kills, is logged with the job.
func TestExecOutputHeldWarned(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Cleanup(func() {
		b, _ := os.ReadFile(pidFile)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// The program waits for the holder to be in its own session, or it
	// would take the holder down with its group.
	e := shell(`setsid sh -c 'echo $$ > `+pidFile+`.tmp; mv `+pidFile+`.tmp `+pidFile+`; exec sleep 30' &
while [ ! -f `+pidFile+` ]; do sleep 0.01; done
echo '{"a":1}'`, 10*time.Second)
	e.waitDelay = 200 * time.Millisecond
	var logs bytes.Buffer
	e.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	out, err := e.Run(context.Background(), Request{JobID: "j7", Task: "tool", Payload: []byte(`{}`)}, nil)
	if err != nil || string(out) != `{"a":1}` {
		t.Fatalf("got %s, %v", out, err)
	}
	for _, want := range []string{"level=WARN", "outside its process group", "job_id=j7", "task=tool"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %q: %q", want, logs.String())
		}
	}
}

// TestExecOutputBounded: a program's stdout is kept up to the result limit
// and its stderr up to maxStderr, however much it prints; a result past the
// limit is invalid_result, not handed on.
func TestExecOutputBounded(t *testing.T) {
	over := strconv.Itoa(maxBody + 1)
	cases := []struct {
		name, script, code string
	}{
		// Valid JSON all the way: only its size is wrong.
		{"result past the limit", `printf '"'; head -c ` + over + ` /dev/zero | tr '\0' e; printf '"'`, CodeInvalidResult},
		{"stderr past the limit", `head -c ` + over + ` /dev/zero | tr '\0' e >&2; exit 1`, CodeBackendError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			res, err := shell(tc.script, 30*time.Second).Run(context.Background(), Request{Payload: []byte(`{}`)}, nil)
			runtime.ReadMemStats(&after)
			var be *Error
			if !errors.As(err, &be) || be.Code != tc.code {
				t.Fatalf("got %d bytes, err %v; want %s", len(res), err, tc.code)
			}
			if tc.code == CodeBackendError && after.TotalAlloc-before.TotalAlloc > maxBody/2 {
				t.Fatalf("%d MiB allocated for stderr kept up to %d bytes", (after.TotalAlloc-before.TotalAlloc)>>20, maxStderr)
			}
		})
	}
}

// groupScript starts a grandchild that records its pid, then waits forever.
func groupScript(dir string) string {
	return `sleep 60 & echo $! > ` + filepath.Join(dir, "grandchild") + `; echo started > ` + filepath.Join(dir, "ready") + `; wait`
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never written", path)
	return ""
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	// The grandchild holds the program's output open. Were only the
	// program killed at the timeout, and the rest of its group once Wait
	// returned, Wait would keep reading the pipes for the whole wait
	// delay, made a minute here: far past the bound below, however slow
	// the machine.
	e := shell(groupScript(dir), 300*time.Millisecond)
	e.waitDelay = time.Minute
	start := time.Now()
	_, err := e.Run(context.Background(), Request{Payload: []byte(`{}`)}, nil)
	var be *Error
	if !errors.As(err, &be) || be.Code != CodeBackendTimeout {
		t.Fatalf("err = %v, want %s", err, CodeBackendTimeout)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	pid, _ := strconv.Atoi(waitFile(t, filepath.Join(dir, "grandchild")))
	proctest.RequireGone(t, "the grandchild", pid, 2*time.Second)
}

func TestExecCancelKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	// As in the timeout's test: were only the program killed, Wait would
	// read the grandchild's pipes for the whole wait delay, a minute here.
	e := shell(groupScript(dir), time.Minute)
	e.waitDelay = time.Minute
	go func() {
		_, err := e.Run(ctx, Request{Payload: []byte(`{}`)}, nil)
		errc <- err
	}()
	waitFile(t, filepath.Join(dir, "ready"))
	pid, _ := strconv.Atoi(waitFile(t, filepath.Join(dir, "grandchild")))
	start := time.Now()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("cancel took %v", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("exec backend ignored cancel")
	}
	proctest.RequireGone(t, "the grandchild", pid, 2*time.Second)
}

func TestHTTPBackend(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte(`{"echo":` + string(b) + `,"job":"` + r.Header.Get("X-Euterpe-Job-Id") + `"}`))
		case "/fail":
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(strings.Repeat("busy ", 300)))
		case "/text":
			w.Write([]byte("plain"))
		case "/huge": // JSON, then more than the bound of blanks
			w.Write([]byte(`{}`))
			w.Write([]byte(strings.Repeat(" ", maxBody)))
		case "/at-bound": // a result of exactly the bound
			w.Write([]byte(`{}`))
			w.Write([]byte(strings.Repeat(" ", maxBody-2)))
		case "/slow":
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	tests := []struct {
		path   string
		want   string
		code   string
		status int
	}{
		{"/ok", `{"echo":{"a":1},"job":"j1"}`, "", 0},
		{"/fail", "", CodeBackendError, 503},
		{"/text", "", CodeInvalidResult, 200},
		{"/huge", "", CodeInvalidResult, 200},
		{"/at-bound", `{}`, "", 0},
		{"/slow", "", CodeBackendTimeout, 0},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			timeout := 10 * time.Second // 16 MiB under the race detector
			if tc.code == CodeBackendTimeout {
				timeout = 300 * time.Millisecond
			}
			h := &HTTP{URL: srv.URL + tc.path, Timeout: timeout, Client: srv.Client()}
			out, err := h.Run(context.Background(), Request{JobID: "j1", Task: "rag", Payload: json.RawMessage(`{"a":1}`)}, nil)
			if tc.code == "" {
				if err != nil || string(out) != tc.want {
					t.Fatalf("got %s, %v", out, err)
				}
				return
			}
			var be *Error
			if !errors.As(err, &be) || be.Code != tc.code || be.Status != tc.status || len(be.Message) > 512 {
				t.Fatalf("err = %v", err)
			}
		})
	}
}
