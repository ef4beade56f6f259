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
	register(&Command{Path: "pipeline list", Usage: "[--status S] [--type T] [--symbol S] [--limit N] [--cursor C] [--all]",
		Summary: "list pipeline jobs, newest first, one JSON object a line", Run: pipelineList("pipeline list", "/v1/pipeline/jobs", "jobs")})
	register(&Command{Path: "pipeline dlq", Usage: "[--type T] [--symbol S] [--limit N] [--cursor C] [--all]",
		Summary: "list dead-lettered pipeline jobs", Run: pipelineList("pipeline dlq", "/v1/pipeline/dlq", "jobs")})
	register(&Command{Path: "pipeline refused", Usage: "[--type T] [--symbol S] [--limit N] [--cursor C] [--all]",
		Summary: "list the scheduled days central refused for good, latest first", Run: pipelineList("pipeline refused", "/v1/pipeline/schedule/refused", "days")})
	register(&Command{Path: "pipeline redrive", Usage: "ID", Summary: "put a dead-lettered pipeline job back in the queue", Run: pipelineRedrive})
}

func pipelineEnqueue(ctx context.Context, env Env, args []string) int {
	fs, open := centralFlags("pipeline enqueue", env)
	typ := fs.String("type", "", "job type, e.g. edge_daily")
	sym := fs.String("symbol", "", "symbol, e.g. an edge id")
	asof := fs.String("asof", "", "UTC day, YYYY-MM-DD")
	const usage = "pipeline enqueue --type T --symbol S --asof YYYY-MM-DD"
	if _, code, ok := positional(fs, env, args, 0, usage); !ok {
		return code
	}
	if *typ == "" || *sym == "" || *asof == "" {
		fmt.Fprintf(env.Stderr, "euterpectl: --type, --symbol and --asof are required; usage: %s\n", usage)
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
	pos, code, ok := positional(fs, env, args, 1, name+" ID")
	if !ok {
		return nil, "", code
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

// maxPipelinePage is the largest page (limit) the pipeline API's lists
// answer.
const maxPipelinePage = 500

// pipelineList runs a list command of the pipeline API: path answers
// keyset pages {<items>: [...], next_cursor}, printed one item a line.
func pipelineList(name, path, items string) func(ctx context.Context, env Env, args []string) int {
	return func(ctx context.Context, env Env, args []string) int {
		fs, open := centralFlags(name, env)
		var status *string
		if path == "/v1/pipeline/jobs" {
			status = fs.String("status", "", "queued, running, succeeded, failed or dead_letter")
		}
		typ := fs.String("type", "", "job type")
		sym := fs.String("symbol", "", "symbol")
		limit := fs.Int("limit", 100, fmt.Sprintf("%s per page (1-%d)", items, maxPipelinePage))
		cursor := fs.String("cursor", "", "start after the page whose next_cursor this is")
		all := fs.Bool("all", false, "follow every page")
		if _, code, ok := positional(fs, env, args, 0, name+" "+commands[name].Usage); !ok {
			return code
		}
		if *limit < 1 || *limit > maxPipelinePage {
			// Central would refuse it with a 400 after the token and the
			// server were checked; said here, it is a usage error like
			// any other flag value that cannot mean what it says.
			fmt.Fprintf(env.Stderr, "euterpectl: --limit must be 1-%d %s a page\n", maxPipelinePage, items)
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
		if *cursor != "" {
			q.Set("cursor", *cursor)
		}
		for {
			var page map[string]json.RawMessage
			if err := c.do(ctx, http.MethodGet, path+"?"+q.Encode(), nil, &page); err != nil {
				return fail(env, err)
			}
			var list []json.RawMessage
			var next string
			if err := json.Unmarshal(page[items], &list); err != nil {
				return fail(env, fmt.Errorf("%s: the answer has no %s list: %w", path, items, err))
			}
			if raw, ok := page["next_cursor"]; ok {
				if err := json.Unmarshal(raw, &next); err != nil {
					return fail(env, fmt.Errorf("%s: next_cursor: %w", path, err))
				}
			}
			for _, it := range list {
				fmt.Fprintln(env.Stdout, string(it))
			}
			if next == "" {
				return 0
			}
			if !*all {
				fmt.Fprintln(env.Stderr, "next_cursor:", next, "(--cursor with it lists the next page, --all every page)")
				return 0
			}
			q.Set("cursor", next)
		}
	}
}
