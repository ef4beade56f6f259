package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/daemon"
)

// The jobs commands talk to euterpe-edge's /v1/jobs API.
func init() {
	register(&Command{Path: "jobs submit", Usage: "--task T --payload @file.json|JSON [--ttl S] [--idempotency-key K] [--follow]",
		Summary: "enqueue a job (with --follow: print events, exit 0 only on done)", Run: jobsSubmit})
	register(&Command{Path: "jobs get", Usage: "ID", Summary: "print a job", Run: jobsGet})
	register(&Command{Path: "jobs events", Usage: "ID [--after EVENT_ID]", Summary: "print a job's events until it ends", Run: jobsEvents})
	register(&Command{Path: "jobs cancel", Usage: "ID", Summary: "cancel a job", Run: jobsCancel})
}

// maxEdgeAnswer bounds one answer of the edge's job API, and one line of
// a job's event stream: a job's result (16 MiB at most from an exec or
// http backend, EUTERPE_LLM_MAX_TEXT_BYTES, 64 MiB at most, from a chat
// backend) and its payload (EUTERPE_MAX_BODY_BYTES, 16 MiB at most),
// JSON-escaped.
const maxEdgeAnswer = 128 << 20

// edgeClient is an HTTP client for one euterpe-edge server.
type edgeClient struct {
	base    string
	http    *http.Client // httpClient
	timeout time.Duration
}

// edgeFlags are the flags of every jobs command that say where and how
// to reach the edge.
type edgeFlags struct {
	server  *string
	timeout *time.Duration
}

func newFlags(name string, env Env) (*flag.FlagSet, edgeFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	def := env.Getenv("EUTERPE_EDGE_URL")
	if def == "" {
		def = "http://127.0.0.1:8070"
	}
	server := fs.String("server", def, "euterpe-edge base URL (env EUTERPE_EDGE_URL)")
	hideDefaultPassword(fs, "server")
	return fs, edgeFlags{server: server, timeout: timeoutFlag(fs)}
}

// client builds the client the flags describe, or prints why it cannot.
func client(env Env, f edgeFlags) (*edgeClient, bool) {
	base, err := serverURL(*f.server)
	if err == nil {
		err = checkTimeout(*f.timeout)
	}
	if err != nil {
		report(env, err)
		return nil, false
	}
	return &edgeClient{base: base, http: httpClient(*f.timeout), timeout: *f.timeout}, true
}

// parseArgs parses flags wherever they appear among positional arguments.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	out := fs.Output()
	fs.SetOutput(flagOutput{out})
	defer fs.SetOutput(out)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// flagOutput is where a FlagSet prints a command line it refuses. Its
// messages name the flag alone, but for "bad flag syntax" (---token=…),
// which quotes the whole argument: the value, which may be the operator
// token or a server URL's password, is left out.
type flagOutput struct{ w io.Writer }

func (o flagOutput) Write(p []byte) (int, error) {
	const syntax = "bad flag syntax: "
	if arg, ok := bytes.CutPrefix(p, []byte(syntax)); ok {
		if name, _, hasValue := bytes.Cut(arg, []byte("=")); hasValue {
			if _, err := fmt.Fprintf(o.w, "%s%s=…\n", syntax, name); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return o.w.Write(p)
}

// apiErr renders an error response body. The server's message is held to
// the cap every Euterpe server keeps; whatever answers at --server (a
// proxy, another program) may not keep it.
func apiErr(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	status := clip(resp.Status, 64)
	if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
		return fmt.Errorf("%s: %s (%s)", status, daemon.CapMessage(e.Error.Message), clip(e.Error.Code, 64))
	}
	return errors.New(status)
}

// checkJobID refuses what cannot be a job id before it becomes part of a
// URL path: the edge streams contract makes every job id a UUID, which
// the gateway also wants in its canonical 36-character form.
func checkJobID(id string) error {
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return fmt.Errorf("%q is not a job id (a UUID, as jobs submit prints it)", clip(id, 80))
	}
	return nil
}

// jobPath is the URL path of job id, then of rest (e.g. "/events").
func jobPath(id, rest string) string {
	return "/v1/jobs/" + url.PathEscape(id) + rest
}

func (c *edgeClient) do(ctx context.Context, method, path string, body []byte, hdr map[string]string) ([]byte, error) {
	ctx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, timedOut(ctx, err, c.timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, apiErr(resp)
	}
	b, err := readAnswer(resp.Body, maxEdgeAnswer, "the edge")
	if err != nil {
		return nil, timedOut(ctx, err, c.timeout)
	}
	return b, nil
}

func jobsSubmit(ctx context.Context, env Env, args []string) int {
	fs, where := newFlags("jobs submit", env)
	task := fs.String("task", "", "task: chat, plan, code, tool, rag or embed")
	payload := fs.String("payload", "{}", "payload JSON, @file to read a file, @- for stdin")
	ttl := fs.Int("ttl", 0, "job TTL in seconds (0: server default)")
	key := fs.String("idempotency-key", "", "Idempotency-Key header")
	follow := fs.Bool("follow", false, "stream events until the job ends")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageExit(err)
	}
	if len(pos) > 0 {
		fmt.Fprintf(env.Stderr, "euterpectl: jobs submit takes no argument: %s (the payload goes in --payload)\n", pos[0])
		return 2
	}
	if *task == "" {
		fmt.Fprintln(env.Stderr, "euterpectl: --task is required")
		return 2
	}
	if *ttl < 0 {
		fmt.Fprintln(env.Stderr, "euterpectl: --ttl must be a number of seconds, or 0 for the server's default")
		return 2
	}
	c, ok := client(env, where)
	if !ok {
		return 2
	}
	raw, err := readPayload(*payload, env.Stdin)
	if err != nil {
		report(env, err)
		return 2
	}
	req := map[string]any{"task": *task, "payload": raw}
	if *ttl > 0 {
		req["ttl_s"] = *ttl
	}
	body, _ := json.Marshal(req)
	hdr := map[string]string{}
	if *key != "" {
		hdr["Idempotency-Key"] = *key
	}
	out, err := c.do(ctx, http.MethodPost, "/v1/jobs", body, hdr)
	if err != nil {
		report(env, err)
		return 1
	}
	fmt.Fprintln(env.Stdout, strings.TrimSpace(string(out)))
	if !*follow || outputFailed(env) {
		return 0 // a failed write is reported by dispatch, exit 1
	}
	var cr struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(out, &cr); err != nil {
		report(env, fmt.Errorf("unreadable response: %w", err))
		return 1
	}
	if err := checkJobID(cr.JobID); err != nil {
		report(env, fmt.Errorf("the server answered: %w", err))
		return 1
	}
	return c.follow(ctx, env, cr.JobID, "")
}

func readPayload(v string, stdin io.Reader) (json.RawMessage, error) {
	var b []byte
	var err error
	switch {
	case v == "@-":
		b, err = io.ReadAll(stdin)
	case strings.HasPrefix(v, "@"):
		b, err = os.ReadFile(v[1:])
	default:
		b = []byte(v)
	}
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	if !json.Valid(b) {
		return nil, errors.New("payload is not valid JSON")
	}
	return json.RawMessage(b), nil
}

// oneID parses the flags and the one job id argument; when it stops the
// command, its int is the exit status.
func oneID(name string, env Env, args []string, extra func(*flag.FlagSet)) (string, *edgeClient, int, bool) {
	fs, where := newFlags(name, env)
	if extra != nil {
		extra(fs)
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", nil, usageExit(err), false
	}
	if len(pos) != 1 {
		fmt.Fprintf(env.Stderr, "euterpectl: %s needs exactly one job id\n", name)
		return "", nil, 2, false
	}
	if err := checkJobID(pos[0]); err != nil {
		report(env, err)
		return "", nil, 2, false
	}
	c, ok := client(env, where)
	return pos[0], c, 2, ok
}

func jobsGet(ctx context.Context, env Env, args []string) int {
	id, c, code, ok := oneID("jobs get", env, args, nil)
	if !ok {
		return code
	}
	out, err := c.do(ctx, http.MethodGet, jobPath(id, ""), nil, nil)
	if err != nil {
		report(env, err)
		return 1
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, out, "", "  ") == nil {
		out = pretty.Bytes()
	}
	fmt.Fprintln(env.Stdout, string(out))
	return 0
}

func jobsCancel(ctx context.Context, env Env, args []string) int {
	id, c, code, ok := oneID("jobs cancel", env, args, nil)
	if !ok {
		return code
	}
	out, err := c.do(ctx, http.MethodPost, jobPath(id, "/cancel"), nil, nil)
	if err != nil {
		report(env, err)
		return 1
	}
	fmt.Fprintln(env.Stdout, strings.TrimSpace(string(out)))
	return 0
}

func jobsEvents(ctx context.Context, env Env, args []string) int {
	var after *string
	id, c, code, ok := oneID("jobs events", env, args, func(fs *flag.FlagSet) {
		after = fs.String("after", "", "resume after this event id")
	})
	if !ok {
		return code
	}
	return c.follow(ctx, env, id, *after)
}

// follow prints each event as one JSON line and returns 0 if the job ended
// done, 1 if it ended error or canceled or the stream broke. A dropped
// connection is resumed from the last event id.
func (c *edgeClient) follow(ctx context.Context, env Env, id, after string) int {
	// finished is the status of a job seen finished after a stream that
	// ended with nothing new: the edge replays a finished job's events up
	// to its terminal one, so a stream opened after that which again
	// brings nothing means the cursor is already past the end.
	finished := ""
	// failures counts the streams in a row that brought nothing: one
	// that moved forward before it broke is worth resuming however
	// often that happens.
	for failures := 0; ; {
		end, last, err := c.stream(ctx, env, id, after)
		if errors.Is(err, errOutputFailed) {
			// Nothing printed from now on could arrive; following on
			// would wait on the job for nothing. dispatch reports the
			// failed write and exits 1.
			return 0
		}
		if end != "" {
			return outcome(end)
		}
		if ctx.Err() != nil {
			return 1
		}
		var perm permanentError
		if errors.As(err, &perm) {
			report(env, err)
			return 1
		}
		if last != "" {
			after = last
			failures = 0
		}
		if errors.Is(err, errStreamClosed) && last == "" {
			if finished != "" {
				return outcome(finished)
			}
			// A job that finished after this stream was opened still
			// needs one more stream for the events it ended with.
			if st, serr := c.status(ctx, id); serr == nil && outcome(st) >= 0 {
				finished = st
				continue
			}
		}
		if failures >= 5 {
			report(env, err)
			return 1
		}
		failures++
		if !daemon.Sleep(ctx, time.Duration(failures)*followPause) {
			return 1
		}
	}
}

// followPause is how long follow waits before reopening a stream after
// the first one in a row that brought nothing; after the nth it waits n
// times as long. A variable so that tests can lengthen it.
var followPause = 200 * time.Millisecond

// outcome is the exit status for a job that ended in status, -1 while it
// has not ended.
func outcome(status string) int {
	switch status {
	case "done":
		return 0
	case "error", "canceled":
		return 1
	}
	return -1
}

// status returns the job's current status.
func (c *edgeClient) status(ctx context.Context, id string) (string, error) {
	out, err := c.do(ctx, http.MethodGet, jobPath(id, ""), nil, nil)
	if err != nil {
		return "", err
	}
	var j struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &j); err != nil {
		return "", fmt.Errorf("unreadable job: %w", err)
	}
	return j.Status, nil
}

type permanentError struct{ error }

var errStreamClosed = errors.New("event stream closed before the job ended")

// errOutputFailed ends a stream whose events could not be printed.
var errOutputFailed = errors.New("the output cannot be written")

func (c *edgeClient) stream(ctx context.Context, env Env, id, after string) (end, last string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+jobPath(id, "/events"), nil)
	if err != nil {
		return "", "", permanentError{err}
	}
	req.Header.Set("Accept", "text/event-stream")
	if after != "" {
		req.Header.Set("Last-Event-ID", after)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", "", timedOut(ctx, err, c.timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := apiErr(resp)
		// An edge busy or briefly away (its Redis, a restart behind a
		// proxy) is waited out like a dropped connection: the job goes
		// on meanwhile. Any other refusal would be the same next time.
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return "", "", err
		}
		return "", "", permanentError{err}
	}
	sc := bufio.NewScanner(resp.Body)
	// A done event carries the job's whole result on one data line.
	sc.Buffer(make([]byte, 64<<10), maxEdgeAnswer)
	var evID, evType string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			evID = line[4:]
		case strings.HasPrefix(line, "event: "):
			evType = line[7:]
		case strings.HasPrefix(line, "data: ") && evType == "stream_error" && evID == "":
			// The gateway's own word, not an entry of the job (every entry
			// has an id): nothing of this job can be read, and every
			// stream reopened would end the same way.
			return "", last, permanentError{streamError(id, line[6:])}
		case strings.HasPrefix(line, "data: ") && evType != "hello":
			if _, err := fmt.Fprintln(env.Stdout, line[6:]); err != nil {
				return "", last, errOutputFailed
			}
			if evID != "" {
				last = evID
			}
			switch evType {
			case "done", "error", "canceled":
				return evType, last, nil
			}
		case line == "":
			evID, evType = "", ""
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			// The same line would come again from the same cursor.
			return "", last, permanentError{fmt.Errorf("job %s: an event line is over %d MiB, more than euterpectl reads", id, maxEdgeAnswer>>20)}
		}
		return "", last, err
	}
	return "", last, errStreamClosed
}

// streamError renders the data of a stream_error frame; text the server
// chose is capped like any answer of its.
func streamError(id, data string) error {
	var e struct{ Code, Message string }
	if json.Unmarshal([]byte(data), &e) != nil || e.Code == "" {
		return fmt.Errorf("job %s: the edge ended the event stream with an error", id)
	}
	return fmt.Errorf("job %s: the edge cannot stream its events: %s (%s)", id, daemon.CapMessage(e.Message), clip(e.Code, 64))
}
