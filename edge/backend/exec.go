package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/procgroup"
)

// Exec runs a program per job: payload JSON on stdin, result JSON on stdout.
// The program runs in a process group of its own; on timeout or
// cancellation, and when it exits, the whole group is killed, and the
// kernel kills the program should the daemon die. What leaves the group
// (setsid, a wrapper running GNU timeout, a daemonising helper) is not
// killed: a program that exits while such a descendant still holds its
// output is logged. It gets a minimal environment (PATH, HOME, LANG,
// TMPDIR, EUTERPE_JOB_ID, EUTERPE_TASK), never the daemon's, which holds
// secrets.
type Exec struct {
	Path    string
	Args    []string
	Timeout time.Duration
	// Logger receives warnings about a run that did not fail it; nil
	// means slog.Default().
	Logger *slog.Logger
	// waitDelay, when not 0, stands for the constant of that name.
	waitDelay time.Duration
}

// waitDelay is how long Wait keeps reading pipes after the program exited
// or was killed, in case something it started still holds them.
const waitDelay = 2 * time.Second

// maxStderr is how much of the end of stderr is kept for the error
// message.
const maxStderr = 4096

// errResultTooLarge ends a run whose stdout passed the result limit.
var errResultTooLarge = errors.New("result too large")

// Run executes the program.
func (e *Exec) Run(ctx context.Context, req Request, _ Delta) (json.RawMessage, error) {
	if e.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.Timeout)
		defer cancel()
	}
	// A result past the limit is refused whatever follows: the group is
	// killed as it passes, not left printing until the timeout.
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	cmd := exec.CommandContext(runCtx, e.Path, e.Args...)
	cmd.Stdin = bytes.NewReader(req.Payload)
	stdout := procgroup.Output{Max: maxBody, OnOverflow: func() { stop(errResultTooLarge) }}
	stderr := procgroup.Output{Max: maxStderr, Tail: true}
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
	if stdout.Overflowed() {
		return nil, Errorf(CodeInvalidResult, 0, "exec backend: result larger than %d bytes", maxBody)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			prefix := "exec backend: "
			status := ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				// ExitCode is -1 for a signal; a shell's $? says which.
				status = 128 + int(ws.Signal())
				prefix += ee.String() + ": "
			}
			// The end of stderr says why (a traceback's last line); it
			// is fitted to the message with its URLs' secrets hidden.
			msg := stderr.Ending(daemon.MaxMessage-len(prefix), daemon.RedactURL)
			if msg == "" {
				return nil, Errorf(CodeBackendError, status, "exec backend: %s", ee)
			}
			return nil, Errorf(CodeBackendError, status, "%s%s", prefix, msg)
		}
		if !errors.Is(err, exec.ErrWaitDelay) {
			return nil, Errorf(CodeBackendUnreachable, 0, "exec backend: %v", err)
		}
		// The program exited 0 and only something it started outside its
		// group kept its output open: its answer is judged like any
		// other, and the holder, which nothing here kills, is reported.
		log := e.Logger
		if log == nil {
			log = slog.Default()
		}
		log.WarnContext(ctx, "exec backend: the program exited 0 but something it started outside its process group (setsid, a daemon) still held its stdout or stderr open; its answer is used, the holder is left running",
			"job_id", req.JobID, "task", req.Task, "program", e.Path)
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
