package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The edges commands read euterpe-central's operator API: the fleet, an
// edge's jobs, a job's events and the live fleet tail. Each prints JSON,
// one object per line for lists and streams.
func init() {
	register(&Command{Path: "edges list", Summary: "list the edges registered with central", Run: edgesList})
	register(&Command{Path: "edges get", Usage: "EDGE_ID", Summary: "print an edge: last seen, version, status, stale", Run: edgesGet})
	register(&Command{Path: "edges jobs", Usage: "EDGE_ID [--status S] [--limit N]", Summary: "list an edge's jobs, most recent first", Run: edgesJobs})
	register(&Command{Path: "edges events", Usage: "EDGE_ID JOB_ID [--follow]", Summary: "print a job's events and gaps (--follow: until it ends)", Run: edgesEvents})
	register(&Command{Path: "edges tail", Usage: "[--edge EDGE_ID] [--last-event-id SEQ] [--count N]", Summary: "follow every edge's events live", Run: edgesTail})
}

// positional parses flags and wants exactly n positional arguments.
func positional(fs *flag.FlagSet, env Env, args []string, n int, usage string) ([]string, bool) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, false
	}
	if len(pos) != n {
		fmt.Fprintf(env.Stderr, "euterpectl: usage: %s\n", usage)
		return nil, false
	}
	return pos, true
}

func printLines(env Env, items []json.RawMessage) {
	for _, it := range items {
		fmt.Fprintln(env.Stdout, string(it))
	}
}

func edgesList(ctx context.Context, env Env, args []string) int {
	fs, client := centralFlags("edges list", env)
	if _, ok := positional(fs, env, args, 0, "edges list"); !ok {
		return 2
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
	pos, ok := positional(fs, env, args, 1, "edges get EDGE_ID")
	if !ok {
		return 2
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
	pos, ok := positional(fs, env, args, 1, "edges jobs EDGE_ID [--status S] [--limit N]")
	if !ok {
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

func edgesEvents(ctx context.Context, env Env, args []string) int {
	fs, client := centralFlags("edges events", env)
	follow := fs.Bool("follow", false, "keep printing new events until the job ends on the edge")
	interval := fs.Duration("interval", 2*time.Second, "how often --follow asks for new events")
	pos, ok := positional(fs, env, args, 2, "edges events EDGE_ID JOB_ID [--follow]")
	if !ok {
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
		q := ""
		if after != "" {
			q = "?after=" + url.QueryEscape(after)
		}
		if err := c.get(ctx, path+q, &out); err != nil {
			return fail(env, err)
		}
		for _, e := range out.Events {
			fmt.Fprintln(env.Stdout, string(e))
			var id struct {
				EntryID string `json:"entry_id"`
			}
			_ = json.Unmarshal(e, &id)
			after = id.EntryID
		}
		// Gaps are printed once each, as {"gap": …} lines.
		for _, g := range out.Gaps {
			var id struct {
				GapID string `json:"gap_id"`
			}
			_ = json.Unmarshal(g, &id)
			if !gaps[id.GapID] {
				gaps[id.GapID] = true
				fmt.Fprintf(env.Stdout, "{\"gap\":%s}\n", g)
			}
		}
		if len(out.Events) >= 1000 {
			continue // more pages of history
		}
		switch out.Job.Status {
		case "done", "error", "canceled":
			return 0
		}
		if !*follow {
			return 0
		}
		select {
		case <-ctx.Done():
			return 1
		case <-time.After(*interval):
		}
	}
}

func edgesTail(ctx context.Context, env Env, args []string) int {
	fs, client := centralFlags("edges tail", env)
	edge := fs.String("edge", "", "only this edge's events")
	last := fs.String("last-event-id", "", "resume after this event seq (0: from the oldest retained event)")
	count := fs.Int("count", 0, "exit after this many events (0: run until interrupted)")
	if _, ok := positional(fs, env, args, 0, "edges tail [--edge EDGE_ID] [--last-event-id SEQ] [--count N]"); !ok {
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
	printed := 0
	// A dropped connection is resumed from the last event printed, so
	// nothing is printed twice or skipped.
	for ctx.Err() == nil {
		req, err := c.request(ctx, http.MethodGet, "/v1/edges/events?"+q.Encode(), nil)
		if err != nil {
			return fail(env, err)
		}
		req.Header.Set("Accept", "text/event-stream")
		if *last != "" {
			req.Header.Set("Last-Event-ID", *last)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintln(env.Stderr, "euterpectl: tail:", err, "(retrying)")
			time.Sleep(2 * time.Second)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			err := apiErr(resp)
			resp.Body.Close()
			return fail(env, err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		id := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				fmt.Fprintln(env.Stdout, strings.TrimPrefix(line, "data: "))
				*last = id
				printed++
				if *count > 0 && printed >= *count {
					resp.Body.Close()
					return 0
				}
			}
		}
		resp.Body.Close()
	}
	return 0
}
