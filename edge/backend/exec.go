package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/vesta-cx/euterpe/daemon/procgroup"
)

// Exec runs a program per job: payload JSON on stdin, result JSON on stdout.
// The program runs in a process group of its own; on timeout or
// cancellation, and when it exits, the whole group is killed, so nothing it
// started outlives the job; the kernel kills it should the daemon die. It gets a minimal environment (PATH, HOME,
// LANG, TMPDIR, EUTERPE_JOB_ID, EUTERPE_TASK), never the daemon's, which
// holds secrets.
type Exec struct {
	Path    string
	Args    []string
	Timeout time.Duration
	// waitDelay, when not 0, stands for the constant of that name.
	waitDelay time.Duration
}

// waitDelay is how long Wait keeps reading pipes after the program exited
// or was killed, in case something it started still holds them.
const waitDelay = 2 * time.Second

// maxStderr is how much of stderr is kept for the error message.
const maxStderr = 4096

// Run executes the program.
func (e *Exec) Run(ctx context.Context, req Request, _ Delta) (json.RawMessage, error) {
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, e.Path, e.Args...)
	cmd.Stdin = bytes.NewReader(req.Payload)
	stdout, stderr := procgroup.Output{Max: maxBody}, procgroup.Output{Max: maxStderr}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = childEnv(req)
	cmd.WaitDelay = waitDelay
	if e.waitDelay != 0 {
		cmd.WaitDelay = e.waitDelay
	}
	// Whatever happens, nothing of the group outlives the job, nor the
	// program the edge daemon should it die.
	procgroup.Contain(cmd)
	err := procgroup.Run(cmd)
	if ctx.Err() != nil {
		return nil, ctxErr(ctx, "exec backend")
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			msg := strings.TrimSpace(stderr.String())
			status := ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				// ExitCode is -1 for a signal; a shell's $? says which.
				status = 128 + int(ws.Signal())
				if msg != "" {
					msg = ee.String() + ": " + msg
				}
			}
			if msg == "" {
				msg = ee.String()
			}
			return nil, Errorf(CodeBackendError, status, "exec backend: %s", msg)
		}
		if !errors.Is(err, exec.ErrWaitDelay) {
			return nil, Errorf(CodeBackendUnreachable, 0, "exec backend: %v", err)
		}
		// The program exited 0 and only a child kept its output open:
		// its answer is judged like any other, size first.
	}
	if stdout.Overflowed() {
		return nil, Errorf(CodeInvalidResult, 0, "exec backend: result larger than %d bytes", maxBody)
	}
	return jsonResult(stdout.Bytes(), 0, "exec backend")
}

func childEnv(req Request) []string {
	env := []string{"EUTERPE_JOB_ID=" + req.JobID, "EUTERPE_TASK=" + req.Task}
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
