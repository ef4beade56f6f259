package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingServer answers every request 404 and counts them: a command
// that refuses its flags must not have sent anything.
func countingServer(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no such edge"}}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// A flag value that cannot mean what it says is a usage error (exit 2,
// one line naming the flag, nothing sent) rather than a silent default:
// a negative count or limit would run unbounded, and a zero or negative
// poll interval would ask central for events as fast as it answers.
func TestBadFlagValuesAreUsageErrors(t *testing.T) {
	url, requests := countingServer(t)
	env := map[string]string{"EUTERPE_CENTRAL_URL": url, "EUTERPE_EDGE_URL": url, "EUTERPE_OPERATOR_TOKEN": "eop_t"}
	for _, tc := range []struct {
		flag string
		args []string
	}{
		{"--interval", []string{"edges", "events", "e", "j", "--follow", "--interval", "0"}},
		{"--interval", []string{"edges", "events", "e", "j", "--follow", "--interval", "-1s"}},
		{"--interval", []string{"edges", "events", "e", "j", "--interval", "1ns"}},
		{"--limit", []string{"edges", "jobs", "e", "--limit", "-1"}},
		{"--count", []string{"edges", "tail", "--count", "-1"}},
		{"--limit", []string{"pipeline", "list", "--limit", "-1"}},
		{"--limit", []string{"pipeline", "list", "--limit", "0"}},
		{"--limit", []string{"pipeline", "dlq", "--limit", "501"}},
		{"--limit", []string{"pipeline", "refused", "--limit", "-5"}},
		{"--timeout", []string{"edges", "list", "--timeout", "0"}},
		{"--timeout", []string{"pipeline", "get", "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d", "--timeout", "-1s"}},
		{"--timeout", []string{"jobs", "get", "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d", "--timeout", "0"}},
		{"--timeout", []string{"jobs", "submit", "--task", "chat", "--timeout", "-1s"}},
	} {
		t.Run(tc.flag+" "+tc.args[len(tc.args)-1], func(t *testing.T) {
			before := requests.Load()
			code, out, errOut := runCtlEnv(env, tc.args...)
			assert.Equal(t, 2, code, errOut)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tc.flag)
			assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
			assert.Equal(t, before, requests.Load(), "a request was sent")
		})
	}
}

// A --server value is refused with a query, which is where a proxy's
// access token would go: the value is named without it, as it is without
// a password, in the error and in the flags' defaults.
func TestServerURLQueryNotPrinted(t *testing.T) {
	const bad = "https://central.example/?access_token=sekrit#frag-sekrit"
	env := map[string]string{"EUTERPE_EDGE_URL": bad, "EUTERPE_CENTRAL_URL": bad, "EUTERPE_OPERATOR_TOKEN": "eop_t"}
	code, _, errOut := runCtlEnv(map[string]string{"EUTERPE_EDGE_URL": "http://ops:sekrit@127.0.0.1:notaport"}, "jobs", "get", "-h")
	assert.Equal(t, 0, code)
	assert.NotContains(t, errOut, "sekrit", "a default that does not parse")
	for _, args := range [][]string{
		{"jobs", "get", "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d"}, {"edges", "list"}, {"pipeline", "list"},
		{"jobs", "get", "-h"}, {"edges", "list", "--bogus"}, {"edges", "list", "--server", bad},
	} {
		code, out, errOut := runCtlEnv(env, args...)
		assert.NotEqual(t, 1, code, "%v", args)
		assert.Contains(t, errOut, "server", "%v", args)
		assert.NotContains(t, out+errOut, "sekrit", "%v", args)
	}
}

// An operator token read from a file keeps the file's line end (CRLF, a
// trailing newline): it is used without it, as central's sign-in form
// uses it. A token with a space or control character inside cannot be
// one central made: refused (exit 2) without being printed or sent.
func TestOperatorTokenWhitespace(t *testing.T) {
	url, d, _ := startCentral(t, "sqlite")
	op, err := d.Operators.Create(context.Background(), "ctl")
	require.NoError(t, err)
	for _, tok := range []string{op.Token + "\r\n", " " + op.Token + "\n"} {
		code, _, errOut := runCtlEnv(map[string]string{"EUTERPE_CENTRAL_URL": url, "EUTERPE_OPERATOR_TOKEN": tok}, "edges", "list")
		assert.Equal(t, 0, code, errOut)
		code, _, errOut = runCtlEnv(map[string]string{"EUTERPE_CENTRAL_URL": url}, "edges", "list", "--token", tok)
		assert.Equal(t, 0, code, errOut)
	}
	srv, requests := countingServer(t)
	for _, tok := range []string{"eop_se\x00krit", "eop_se\nkrit", "eop_se krit"} {
		code, out, errOut := runCtlEnv(map[string]string{"EUTERPE_CENTRAL_URL": srv, "EUTERPE_OPERATOR_TOKEN": tok}, "pipeline", "list")
		assert.Equal(t, 2, code, errOut)
		assert.Empty(t, out)
		assert.Contains(t, errOut, "operator token")
		assert.NotContains(t, errOut, "krit")
	}
	assert.Zero(t, requests.Load())
}
