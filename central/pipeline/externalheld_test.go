package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An exec program that exits 0 while something it started outside its
// process group (setsid, a daemon) still holds its stdout is judged by
// what it answered before it exited, as any program exiting 0 is: a
// contract answer stands, with a warning naming the holder; no answer is
// refused as INVALID_ANSWER (a wrapper that daemonises the real stage
// fails the same way on every attempt), its message naming the holder,
// never os/exec's bare "WaitDelay expired". The warning names the job.
func TestExecOutputHeldAfterExit(t *testing.T) {
	cases := []struct {
		name, then string // then: the program's last line
		ref, code  string
	}{
		{"answered", `cat >/dev/null; echo '{"result_ref":"s3://b/k.json"}'`, "s3://b/k.json", ""},
		{"contract error", `echo '{"error_code":"UPSTREAM_EMPTY","error_message":"no prices"}'`, "", CodeUpstreamEmpty},
		{"no answer", `exit 0`, "", CodeInvalidAnswer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			t.Cleanup(func() {
				b, _ := os.ReadFile(pidFile)
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			// The holder records its pid once in its own session; the
			// program waits for that, or it would take the holder down
			// with its group.
			p := script(t, "setsid sh -c 'echo $$ > "+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"; exec sleep 600' &\n"+
				"while [ ! -f "+pidFile+" ]; do sleep 0.01; done\n"+c.then)
			var logs bytes.Buffer
			ref, err := Exec{Path: p, Timeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Run(context.Background(), msg)
			if ref != c.ref || ErrorCode(err) != c.code {
				t.Fatalf("ref %q err %v; want %q %s", ref, err, c.ref, c.code)
			}
			if c.code == CodeInvalidAnswer && (strings.Contains(err.Error(), "WaitDelay") || !strings.Contains(err.Error(), "outside its process group")) {
				t.Fatalf("message %q does not name the holder", err)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "outside its process group") {
				t.Fatalf("no warning naming the holder logged: %q", logs.String())
			}
			// §2, §8: a line about a job run carries its tracing fields.
			for _, f := range []string{"job_id=" + msg.JobID, "idempotency_key=" + msg.IdempotencyKey, "symbol=" + msg.Symbol,
				"asof=" + msg.Asof, "status=" + StatusRunning, "attempt=1"} {
				if !strings.Contains(logs.String(), f) {
					t.Errorf("warning lacks %s: %q", f, logs.String())
				}
			}
		})
	}
}
