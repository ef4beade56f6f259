package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/procgroup"
)

// MaxAnswerBytes bounds what an exec program or HTTP endpoint may answer.
const MaxAnswerBytes = 64 << 10

// answer is the contract answer of an external job type: exactly one of
// {"result_ref": …} or {"error_code": …, "error_message": …}.
type answer struct {
	ResultRef    *string `json:"result_ref"`
	ErrorCode    *string `json:"error_code"`
	ErrorMessage *string `json:"error_message"`
}

// parseAnswer reads an answer strictly. Anything else — not JSON, unknown
// fields, both or neither, a code outside §4.3 — is refused as
// INVALID_ANSWER, with what was wrong in the message (never the raw answer,
// which may hold anything).
func parseAnswer(b []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimSpace(b)))
	dec.DisallowUnknownFields()
	var a answer
	if err := dec.Decode(&a); err != nil {
		return "", Fail(CodeInvalidAnswer, "refused answer: not a JSON object of result_ref or error_code/error_message")
	}
	if !atEOF(dec) {
		return "", Fail(CodeInvalidAnswer, "refused answer: trailing data after the JSON object")
	}
	switch {
	case a.ResultRef != nil && a.ErrorCode == nil && a.ErrorMessage == nil:
		if *a.ResultRef == "" || len(*a.ResultRef) > 2048 {
			return "", Fail(CodeInvalidAnswer, "refused answer: result_ref must be 1-2048 characters")
		}
		return *a.ResultRef, nil
	case a.ErrorCode != nil && a.ResultRef == nil:
		if !isStageCode(*a.ErrorCode) {
			return "", Fail(CodeInvalidAnswer, fmt.Sprintf("refused answer: error_code %q is not one of %v", truncate(*a.ErrorCode, 64), StageCodes))
		}
		msg := ""
		if a.ErrorMessage != nil {
			msg = *a.ErrorMessage
		}
		return "", Fail(*a.ErrorCode, msg)
	}
	return "", Fail(CodeInvalidAnswer, "refused answer: want exactly one of result_ref or error_code")
}

// atEOF reports whether dec has nothing but white space left. Not
// dec.More: it answers false before a stray ']' or '}', which would let
// such trailing data through.
func atEOF(dec *json.Decoder) bool {
	_, err := dec.Token()
	return errors.Is(err, io.EOF)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Exec is a job type run by an external program: the JobMessage as JSON on
// stdin, the answer on stdout. The program runs in its own process group,
// killed whole on timeout or when the job's lease is lost, with the minimal
// environment of ExecEnv — none of central's own (its keyring, its
// database URL).
type Exec struct {
	Path    string
	Timeout time.Duration
	// Logger receives warnings about a run that did not fail it; nil
	// means slog.Default().
	Logger *slog.Logger
}

// Run runs the program once.
func (x Exec) Run(ctx context.Context, m JobMessage) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, x.Timeout)
	defer cancel()
	in, _ := json.Marshal(m)
	cmd := exec.CommandContext(ctx, x.Path)
	cmd.Env = ExecEnv()
	cmd.Stdin = bytes.NewReader(in)
	// The end of stderr is kept: a failing program says why last.
	out, errb := procgroup.Output{Max: MaxAnswerBytes}, procgroup.Output{Max: 2048, Tail: true}
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 2 * time.Second
	// Its process group is killed on timeout, on a lost lease and once it
	// answers; the kernel kills the program should this worker die.
	procgroup.Contain(cmd)
	err := procgroup.Run(cmd)
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && context.Cause(ctx) == context.DeadlineExceeded {
			return "", Fail(CodeStageUnavailable, fmt.Sprintf("exec %s: no answer within %s", x.Path, x.Timeout))
		}
		return "", ctx.Err()
	}
	// os/exec reports ErrWaitDelay only for a program that exited 0 while
	// something it started outside its process group (setsid, a daemon)
	// still held its stdout or stderr. What it answered before it exited
	// is judged as any exit 0's is; the holder outlives the run.
	held := ""
	if errors.Is(err, exec.ErrWaitDelay) {
		err, held = nil, "the program exited 0 but something it started outside its process group (setsid, a daemon) still held its stdout or stderr open"
		log := x.Logger
		if log == nil {
			log = slog.Default()
		}
		// §8: the line carries the job's tracing fields like every line
		// about a run.
		jobLog(log, m, StatusRunning, nil).WarnContext(ctx, "exec job type: "+held+"; its answer is used, the holder is left running", "program", x.Path)
	}
	if err != nil {
		// A contract answer on stdout stands whatever the exit status; a
		// crash without one is an unavailable stage (retried), even when
		// it flooded stdout on its way down: the exit status says more
		// about the run than the flood does.
		if !out.Overflowed() {
			if ref, perr := parseAnswer(out.Bytes()); perr == nil || ErrorCode(perr) != CodeInvalidAnswer {
				return ref, perr
			}
		}
		prefix := fmt.Sprintf("exec %s: %v: ", x.Path, err)
		return "", Fail(CodeStageUnavailable, prefix+errb.Ending(daemon.MaxMessage-len(prefix), redactSecrets))
	}
	if out.Overflowed() {
		return "", Fail(CodeInvalidAnswer, fmt.Sprintf("refused answer: more than %d bytes on stdout", MaxAnswerBytes))
	}
	ref, perr := parseAnswer(out.Bytes())
	var je *JobError
	if held != "" && errors.As(perr, &je) && je.Code == CodeInvalidAnswer {
		return "", Fail(CodeInvalidAnswer, je.Message+" ("+held+")")
	}
	return ref, perr
}

// execEnvKept are the variables of central's environment an exec job
// type's program sees, when set.
var execEnvKept = []string{"PATH", "HOME", "LANG"}

// defaultPath is the program's PATH when central has none.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// ExecEnv is the whole environment of an exec job type's program: PATH,
// HOME and LANG as central has them, and TZ=UTC (the contract's timezone).
// Nothing else reaches it — no EUTERPE_* variable (EUTERPE_KEYRING holds
// the KEKs, EUTERPE_DATABASE_URL the database password), no token, no
// cloud credential: the program gets what it needs from its message and
// its own configuration.
func ExecEnv() []string {
	env := make([]string, 0, len(execEnvKept)+1)
	for _, k := range execEnvKept {
		v, ok := os.LookupEnv(k)
		switch {
		case ok:
			env = append(env, k+"="+v)
		case k == "PATH":
			env = append(env, k+"="+defaultPath)
		}
	}
	return append(env, "TZ=UTC")
}

// ParseTypes reads EUTERPE_PIPELINE_TYPES: comma-separated
// name=exec:/path/to/program or name=http:https://host/path entries.
func ParseTypes(v string, timeout time.Duration, client *http.Client) ([]JobType, error) {
	var out []JobType
	seen := map[string]bool{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, spec, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok || !jobTypeRe.MatchString(name) {
			return nil, fmt.Errorf("entry %q: want name=exec:/path or name=http:URL, name matching %s", part, jobTypeRe)
		}
		if seen[name] {
			return nil, fmt.Errorf("job type %q listed twice", name)
		}
		seen[name] = true
		switch {
		case strings.HasPrefix(spec, "exec:"):
			p := strings.TrimPrefix(spec, "exec:")
			if !strings.HasPrefix(p, "/") {
				return nil, fmt.Errorf("job type %s: exec path must be absolute", name)
			}
			out = append(out, JobType{Name: name, Runner: Exec{Path: p, Timeout: timeout}})
		case strings.HasPrefix(spec, "http:"):
			u := strings.TrimPrefix(spec, "http:")
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				return nil, fmt.Errorf("job type %s: want http:http://… or http:https://…", name)
			}
			out = append(out, JobType{Name: name, Runner: HTTP{URL: u, Timeout: timeout, Client: client}})
		default:
			return nil, fmt.Errorf("job type %s: want exec:/path or http:URL", name)
		}
	}
	return out, nil
}
