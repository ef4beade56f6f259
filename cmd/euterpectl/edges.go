package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
)

// The edges commands read euterpe-central's operator API: the fleet, an
// edge's jobs, a job's events and the live fleet tail. Each prints JSON,
// one object per line for lists and streams.
func init() {
	register(&Command{Path: "edges list", Summary: "list the edges registered with central", Run: edgesList})
	register(&Command{Path: "edges get", Usage: "EDGE_ID", Summary: "print an edge: last seen, version, status, stale", Run: edgesGet})
	register(&Command{Path: "edges jobs", Usage: "EDGE_ID [--status S] [--limit N]", Summary: "list an edge's jobs, most recent first", Run: edgesJobs})
	register(&Command{Path: "edges events", Usage: "EDGE_ID JOB_ID [--follow] [--interval D]", Summary: "print a job's events and gaps (--follow: until it ends)", Run: edgesEvents})
	register(&Command{Path: "edges tail", Usage: "[--edge EDGE_ID] [--last-event-id SEQ] [--count N]", Summary: "follow every edge's events live", Run: edgesTail})
}

// minPollInterval is the shortest --interval edges events takes.
const minPollInterval = 10 * time.Millisecond

// entryIDRe is a stream entry id "<ms>-<seq>", the only after= central
// takes.
var entryIDRe = regexp.MustCompile(`^[0-9]{1,20}-[0-9]{1,20}$`)

func printLines(env Env, items []json.RawMessage) {
	for _, it := range items {
		fmt.Fprintln(env.Stdout, string(it))
	}
}

func edgesList(ctx context.Context, env Env, args []string) int {
	fs, client := centralFlags("edges list", env)
	if _, code, ok := positional(fs, env, args, 0, "edges list"); !ok {
		return code
	}
	c, code := openCentral(env, client)
	if c == nil {
		return code
	}
	var out struct{ Edges []json.RawMessage }
	if err := c.get(ctx, "/v1/edges", &out); err != nil {
		return fail(env, err)
	}
	printLines(env, out.Edges)
	return 0
}

func edgesGet(ctx context.Context, env Env, args []string) int {
	fs, client := centralFlags("edges get", env)
	pos, code, ok := positional(fs, env, args, 1, "edges get EDGE_ID")
	if !ok {
		return code
	}
	c, code := openCentral(env, client)
	if c == nil {
		return code
	}
	var out json.RawMessage
	if err := c.get(ctx, "/v1/edges/"+url.PathEscape(pos[0]), &out); err != nil {
		return fail(env, err)
	}
	fmt.Fprintln(env.Stdout, string(out))
	return 0
}

func edgesJobs(ctx context.Context, env Env, args []string) int {
	fs, client := centralFlags("edges jobs", env)
	status := fs.String("status", "", "only jobs in this status: queued, running, done, error or canceled")
	limit := fs.Int("limit", 0, "print at most this many jobs (0: all)")
	pos, code, ok := positional(fs, env, args, 1, "edges jobs EDGE_ID [--status S] [--limit N]")
	if !ok {
		return code
	}
	if *limit < 0 {
		fmt.Fprintln(env.Stderr, "euterpectl: --limit must be a number of jobs, or 0 for all")
		return 2
	}
	c, code := openCentral(env, client)
	if c == nil {
		return code
	}
	cursor, printed := "", 0
	for {
		q := url.Values{"limit": {"200"}}
		if *status != "" {
			q.Set("status", *status)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Jobs       []json.RawMessage
			NextCursor string `json:"next_cursor"`
		}
		if err := c.get(ctx, "/v1/edges/"+url.PathEscape(pos[0])+"/jobs?"+q.Encode(), &page); err != nil {
			return fail(env, err)
		}
		for _, j := range page.Jobs {
			if *limit > 0 && printed == *limit {
				return 0
			}
			fmt.Fprintln(env.Stdout, string(j))
			printed++
		}
		if cursor = page.NextCursor; cursor == "" {
			return 0
		}
	}
}

// edgeEventsPage is how many events edges events asks for at a time: few
// enough that a page of the largest events fits maxCentralAnswer (central's
// own default, 1,000, would not).
const edgeEventsPage = 100

func edgesEvents(ctx context.Context, env Env, args []string) int {
	fs, client := centralFlags("edges events", env)
	follow := fs.Bool("follow", false, "keep printing new events until the job ends on the edge")
	interval := fs.Duration("interval", 2*time.Second, "how often --follow asks for new events")
	pos, code, ok := positional(fs, env, args, 2, "edges events EDGE_ID JOB_ID [--follow] [--interval D]")
	if !ok {
		return code
	}
	if *interval < minPollInterval {
		// Below it --follow would ask central again as fast as it answers.
		fmt.Fprintf(env.Stderr, "euterpectl: --interval must be at least %s\n", minPollInterval)
		return 2
	}
	c, code := openCentral(env, client)
	if c == nil {
		return code
	}
	path := "/v1/edges/" + url.PathEscape(pos[0]) + "/jobs/" + url.PathEscape(pos[1]) + "/events"
	after := ""
	gaps := map[string]bool{}
	for {
		var out struct {
			Job struct {
				Status string `json:"status"`
			}
			Events []json.RawMessage
			Gaps   []json.RawMessage
		}
		q := "?limit=" + strconv.Itoa(edgeEventsPage)
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		if err := c.get(ctx, path+q, &out); err != nil {
			return fail(env, err)
		}
		// The next request asks for what follows the last event printed;
		// without its entry id it could only start over and print
		// everything again.
		resumable := true
		for _, e := range out.Events {
			fmt.Fprintln(env.Stdout, string(e))
			var id struct {
				EntryID string `json:"entry_id"`
			}
			if json.Unmarshal(e, &id) == nil && entryIDRe.MatchString(id.EntryID) {
				after, resumable = id.EntryID, true
			} else {
				resumable = false
			}
		}
		// Gaps are printed once each, as {"gap": …} lines; one without
		// an id is known by its whole text.
		for _, g := range out.Gaps {
			var id struct {
				GapID string `json:"gap_id"`
			}
			key := string(g)
			if json.Unmarshal(g, &id) == nil && id.GapID != "" {
				key = id.GapID
			}
			if !gaps[key] {
				gaps[key] = true
				fmt.Fprintf(env.Stdout, "{\"gap\":%s}\n", g)
			}
		}
		if outputFailed(env) {
			return 0 // dispatch reports the failed write and exits 1
		}
		more := len(out.Events) >= edgeEventsPage // more pages of history
		if !more {
			switch out.Job.Status {
			case "done", "error", "canceled":
				return 0
			}
			if !*follow {
				return 0
			}
		}
		if !resumable {
			report(env, errors.New("central sent an event without a stream entry_id: the events after it cannot be asked for"))
			return 1
		}
		if more {
			continue
		}
		if !daemon.Sleep(ctx, *interval) {
			return 1
		}
	}
}

func edgesTail(ctx context.Context, env Env, args []string) int {
	fs, client := centralFlags("edges tail", env)
	edge := fs.String("edge", "", "only this edge's events")
	last := fs.String("last-event-id", "", "resume after this event seq (0: from the oldest retained event)")
	count := fs.Int("count", 0, "exit after this many events (0: run until interrupted)")
	if _, code, ok := positional(fs, env, args, 0, "edges tail [--edge EDGE_ID] [--last-event-id SEQ] [--count N]"); !ok {
		return code
	}
	if *count < 0 {
		fmt.Fprintln(env.Stderr, "euterpectl: --count must be a number of events, or 0 to run until interrupted")
		return 2
	}
	c, code := openCentral(env, client)
	if c == nil {
		return code
	}
	q := url.Values{}
	if *edge != "" {
		q.Set("edge_id", *edge)
	}
	// A seq the user gives may come from the jobs API rather than from a
	// tail: central resumes from ?last_event_id= at least once, never
	// skipping a row of a transaction that was open when that seq was
	// read, and from Last-Event-ID exactly. So the first connection sends
	// the user's seq as the parameter, and reconnections send the id of
	// the last event printed as the header.
	fromTail := false
	pathFor := func() (string, string) {
		v := url.Values{}
		maps.Copy(v, q)
		header := *last
		if !fromTail && *last != "" {
			v.Set("last_event_id", *last)
			header = ""
		}
		if len(v) == 0 {
			return "/v1/edges/events", header
		}
		return "/v1/edges/events?" + v.Encode(), header
	}
	printed := 0
	emit := func(id, data string) bool {
		if _, err := fmt.Fprintln(env.Stdout, data); err != nil {
			// Output that cannot be written (a full disk; a closed pipe
			// ends the process by SIGPIPE) ends the tail: it would run for
			// ever with nowhere to go. dispatch reports it and exits 1.
			return true
		}
		if id != "" {
			*last = id
			fromTail = true
		}
		printed++
		return *count > 0 && printed >= *count
	}
	// An interrupt is how a tail without --count ends; one with --count
	// ends short of what was asked.
	interrupted := func() int {
		if *count > 0 {
			return 1
		}
		return 0
	}
	// A stream that ended or broke is resumed from the last event
	// printed, so nothing is printed twice or skipped.
	delay := tailRetryMin
	for {
		path, header := pathFor()
		n, stop, err := c.tailOnce(ctx, path, header, emit)
		if stop {
			return 0
		}
		if ctx.Err() != nil {
			return interrupted()
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return fail(env, err)
		}
		if n > 0 {
			delay = tailRetryMin
		}
		report(env, fmt.Errorf("tail: %w (reconnecting in %s)", err, delay))
		if !daemon.Sleep(ctx, delay) {
			return interrupted()
		}
		delay = min(2*delay, tailRetryMax)
	}
}

// The fleet tail's pauses before reconnecting: the shortest after a
// stream that brought events, doubled after each that brought none.
// Central ends streams on its own (a failed read, a restart, a revoked
// token), and each reconnection costs it a query and a credential check.
const (
	tailRetryMin = 500 * time.Millisecond
	tailRetryMax = 30 * time.Second
)

var errTailEnded = errors.New("central ended the stream")

// tailOnce reads one fleet tail stream from after last, passing each
// event to emit until emit asks to stop (stop) or the stream ends, and
// returns how many events it passed on. A permanentError is one that
// reconnecting would meet again.
func (c *centralClient) tailOnce(ctx context.Context, path, last string, emit func(id, data string) bool) (n int, stop bool, err error) {
	req, err := c.request(ctx, http.MethodGet, path, nil)
	if err != nil {
		return 0, false, permanentError{err}
	}
	req.Header.Set("Accept", "text/event-stream")
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, false, timedOut(ctx, err, c.timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := apiErr(resp)
		// Central busy or away (a restart, its database) is worth
		// waiting out; any other refusal would be the same next time.
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return 0, false, err
		}
		return 0, false, permanentError{err}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	// As in any event stream, an event without an id line keeps the
	// previous one.
	id := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			n++
			if emit(id, strings.TrimPrefix(line, "data: ")) {
				return n, true, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			// The same event would stop every later stream too; its id
			// line came before the data that is too long.
			return n, false, permanentError{fmt.Errorf("event %s is over 4 MiB (--last-event-id %[1]s resumes after it): %w", clip(id, 40), err)}
		}
		return n, false, fmt.Errorf("reading the stream: %w", err)
	}
	return n, false, errTailEnded
}
