package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// centralClient calls euterpe-central's operator API (the fleet, the
// pipeline queue) with an operator token, which it only ever sends in the
// Authorization header.
type centralClient struct {
	base, token string
	http        *http.Client // httpClient
	timeout     time.Duration
}

// centralFlags declares --server (EUTERPE_CENTRAL_URL) and --token
// (EUTERPE_OPERATOR_TOKEN); the returned function builds the client once
// the flags are parsed.
func centralFlags(name string, env Env) (*flag.FlagSet, func() (*centralClient, error)) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	def := env.Getenv("EUTERPE_CENTRAL_URL")
	if def == "" {
		def = "http://127.0.0.1:8090"
	}
	server := fs.String("server", def, "euterpe-central base URL (env EUTERPE_CENTRAL_URL)")
	hideDefaultPassword(fs, "server")
	token := fs.String("token", "", "operator token (env EUTERPE_OPERATOR_TOKEN; prefer the variable: flags show in ps)")
	timeout := timeoutFlag(fs)
	return fs, func() (*centralClient, error) {
		t := *token
		if t == "" {
			t = env.Getenv("EUTERPE_OPERATOR_TOKEN")
		}
		// A token read from a file keeps its line end; central's sign-in
		// form trims it too.
		t = strings.TrimSpace(t)
		if t == "" {
			return nil, errors.New("an operator token is required: EUTERPE_OPERATOR_TOKEN or --token (euterpe-central operator create --name N)")
		}
		if strings.IndexFunc(t, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
			// Not printed: it may be a real token with a stray byte.
			return nil, errors.New("the operator token holds a space or control character: check EUTERPE_OPERATOR_TOKEN or --token")
		}
		base, err := serverURL(*server)
		if err != nil {
			return nil, err
		}
		if err := checkTimeout(*timeout); err != nil {
			return nil, err
		}
		return &centralClient{base: base, token: t, http: httpClient(*timeout), timeout: *timeout}, nil
	}
}

// openCentral builds the client, or prints why it cannot (exit status 2).
func openCentral(env Env, open func() (*centralClient, error)) (*centralClient, int) {
	c, err := open()
	if err != nil {
		report(env, err)
		return nil, 2
	}
	return c, 0
}

func (c *centralClient) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	return req, nil
}

// do sends body (JSON, when not nil) and decodes a 2xx answer into out; any
// other status is an error carrying the API's code and, when the server
// gave one, its Retry-After.
func (c *centralClient) do(ctx context.Context, method, path string, body any, out any) error {
	ctx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return timedOut(ctx, err, c.timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		err := apiErr(resp)
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			err = fmt.Errorf("%w; retry after %ss", err, clip(ra, 32))
		}
		return err
	}
	b, err := readAnswer(resp.Body, maxCentralAnswer, "central")
	if err != nil {
		return timedOut(ctx, err, c.timeout)
	}
	return json.Unmarshal(b, out)
}

// maxCentralAnswer bounds what one answer of central's operator API may
// be. The largest, a page of edge events, asks for edgeEventsPage events:
// at 64 KiB of data each (wire.MaxDataBytes), HTML-escaped by the JSON
// encoder at worst six bytes for one, a page stays under it.
const maxCentralAnswer = 64 << 20

func (c *centralClient) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, out)
}

func fail(env Env, err error) int {
	report(env, err)
	return 1
}
