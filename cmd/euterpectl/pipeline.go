package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// The pipeline commands talk to euterpe-central's operator API
// (/v1/pipeline/…) with an operator token.
func init() {
	register(&Command{Path: "pipeline enqueue", Usage: "--type T --symbol S --asof YYYY-MM-DD",
		Summary: "submit a pipeline job (the existing one if its key is active)", Run: pipelineEnqueue})
	register(&Command{Path: "pipeline get", Usage: "ID", Summary: "print a pipeline job", Run: pipelineGet})
	register(&Command{Path: "pipeline list", Usage: "[--status S] [--type T] [--symbol S] [--limit N] [--all]",
		Summary: "list pipeline jobs, newest first, one JSON object a line", Run: pipelineList("/v1/pipeline/jobs")})
	register(&Command{Path: "pipeline dlq", Usage: "[--type T] [--symbol S] [--limit N] [--all]",
		Summary: "list dead-lettered pipeline jobs", Run: pipelineList("/v1/pipeline/dlq")})
	register(&Command{Path: "pipeline redrive", Usage: "ID", Summary: "put a dead-lettered pipeline job back in the queue", Run: pipelineRedrive})
}

func pipelineEnqueue(ctx context.Context, env Env, args []string) int {
	fs, open := centralFlags("pipeline enqueue", env)
	typ := fs.String("type", "", "job type, e.g. edge_daily")
	sym := fs.String("symbol", "", "symbol, e.g. an edge id")
	asof := fs.String("asof", "", "UTC day, YYYY-MM-DD")
	if _, err := parseArgs(fs, args); err != nil || *typ == "" || *sym == "" || *asof == "" {
		fmt.Fprintln(env.Stderr, "usage: euterpectl pipeline enqueue --type T --symbol S --asof YYYY-MM-DD")
		return 2
	}
	c, err := open()
	if err != nil {
		report(env, err)
		return 2
	}
	var out json.RawMessage
	if err := c.do(ctx, http.MethodPost, "/v1/pipeline/jobs", map[string]string{"job_type": *typ, "symbol": *sym, "asof": *asof}, &out); err != nil {
		return fail(env, err)
	}
	fmt.Fprintln(env.Stdout, string(out))
	return 0
}

// pipelineID parses the flags and the one job id argument.
func pipelineID(name string, env Env, args []string) (*centralClient, string, int) {
	fs, open := centralFlags(name, env)
	pos, err := parseArgs(fs, args)
	if err != nil || len(pos) != 1 {
		fmt.Fprintf(env.Stderr, "usage: euterpectl %s ID\n", name)
		return nil, "", 2
	}
	c, err := open()
	if err != nil {
		report(env, err)
		return nil, "", 2
	}
	return c, pos[0], 0
}

func pipelineGet(ctx context.Context, env Env, args []string) int {
	c, id, code := pipelineID("pipeline get", env, args)
	if c == nil {
		return code
	}
	var out json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/v1/pipeline/jobs/"+url.PathEscape(id), nil, &out); err != nil {
		return fail(env, err)
	}
	fmt.Fprintln(env.Stdout, string(out))
	return 0
}

func pipelineRedrive(ctx context.Context, env Env, args []string) int {
	c, id, code := pipelineID("pipeline redrive", env, args)
	if c == nil {
		return code
	}
	var out json.RawMessage
	if err := c.do(ctx, http.MethodPost, "/v1/pipeline/jobs/"+url.PathEscape(id)+"/redrive", nil, &out); err != nil {
		return fail(env, err)
	}
	fmt.Fprintln(env.Stdout, string(out))
	return 0
}

func pipelineList(path string) func(ctx context.Context, env Env, args []string) int {
	return func(ctx context.Context, env Env, args []string) int {
		fs, open := centralFlags("pipeline list", env)
		var status *string
		if path == "/v1/pipeline/jobs" {
			status = fs.String("status", "", "queued, running, succeeded, failed or dead_letter")
		}
		typ := fs.String("type", "", "job type")
		sym := fs.String("symbol", "", "symbol")
		limit := fs.Int("limit", 100, "jobs per page (1-500)")
		all := fs.Bool("all", false, "follow every page")
		if pos, err := parseArgs(fs, args); err != nil || len(pos) != 0 {
			fmt.Fprintln(env.Stderr, "usage: euterpectl pipeline list|dlq [--status S] [--type T] [--symbol S] [--limit N] [--all]")
			return 2
		}
		c, err := open()
		if err != nil {
			report(env, err)
			return 2
		}
		q := url.Values{}
		if status != nil && *status != "" {
			q.Set("status", *status)
		}
		if *typ != "" {
			q.Set("job_type", *typ)
		}
		if *sym != "" {
			q.Set("symbol", *sym)
		}
		q.Set("limit", fmt.Sprint(*limit))
		for {
			var page struct {
				Jobs       []json.RawMessage `json:"jobs"`
				NextCursor string            `json:"next_cursor"`
			}
			if err := c.do(ctx, http.MethodGet, path+"?"+q.Encode(), nil, &page); err != nil {
				return fail(env, err)
			}
			for _, j := range page.Jobs {
				fmt.Fprintln(env.Stdout, string(j))
			}
			if page.NextCursor == "" {
				return 0
			}
			if !*all {
				fmt.Fprintln(env.Stderr, "next_cursor:", page.NextCursor, "(--all follows every page)")
				return 0
			}
			q.Set("cursor", page.NextCursor)
		}
	}
}
