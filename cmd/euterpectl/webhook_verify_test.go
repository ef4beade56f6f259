package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/webhook"
)

// signedRequest is a webhook request as the dispatcher sends it (headers
// from webhook.NewHeaders), serialized as raw HTTP, with its body replaced
// by sent (to tamper with it after signing).
func signedRequest(t *testing.T, secret []byte, signed, sent []byte) []byte {
	t.Helper()
	h, err := webhook.NewHeaders(time.Now(), "evt_1", signed, secret)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, "http://receiver.example.com/euterpe", bytes.NewReader(sent))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	var raw bytes.Buffer
	if err := req.Write(&raw); err != nil {
		t.Fatal(err)
	}
	return raw.Bytes()
}

// TestWebhookVerifyCommand runs `euterpectl webhook verify` on saved
// requests signed with webhook.NewHeaders: exit 0 and the event id for a
// valid one, exit 1 with a reason for a tampered body or the wrong secret,
// exit 2 without a secret.
func TestWebhookVerifyCommand(t *testing.T) {
	secret := []byte("whsec_cli_test")
	body := []byte(`{"event_id":"evt_1","job_id":"j1","sequence":1,"status":"queued"}`)
	tampered := []byte(`{"event_id":"evt_1","job_id":"j1","sequence":1,"status":"succeeded"}`)
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		req    []byte
		code   int
		reason string
	}{
		{"valid", []string{"--secret", string(secret)}, nil, signedRequest(t, secret, body, body), 0, ""},
		{"valid from env", []string{"--secret-env", "WH_SECRET"}, map[string]string{"WH_SECRET": string(secret)}, signedRequest(t, secret, body, body), 0, ""},
		{"valid with old secret listed too", []string{"--secret", "whsec_other", "--secret", string(secret)}, nil, signedRequest(t, secret, body, body), 0, ""},
		{"tampered body", []string{"--secret", string(secret)}, nil, signedRequest(t, secret, body, tampered), 1, "bad_signature"},
		{"wrong secret", []string{"--secret", "whsec_wrong"}, nil, signedRequest(t, secret, body, body), 1, "bad_signature"},
		{"no secret", nil, nil, signedRequest(t, secret, body, body), 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := dispatch(context.Background(), Env{Stdin: bytes.NewReader(tc.req), Stdout: &out, Stderr: &errb,
				Getenv: func(k string) string { return tc.env[k] }}, append([]string{"webhook", "verify"}, tc.args...))
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %s stderr %s", code, tc.code, out.String(), errb.String())
			}
			if tc.code == 2 {
				return
			}
			var res struct {
				Valid   bool   `json:"valid"`
				EventID string `json:"event_id"`
				Reason  string `json:"reason"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
			if tc.code == 0 && (!res.Valid || res.EventID != "evt_1") {
				t.Fatalf("valid request reported %+v", res)
			}
			if tc.code == 1 && (res.Valid || res.Reason != tc.reason) {
				t.Fatalf("rejected request reported %+v, want reason %s", res, tc.reason)
			}
			if bytes.Contains(out.Bytes(), secret) || bytes.Contains(errb.Bytes(), secret) {
				t.Fatal("the secret was printed")
			}
		})
	}
}

// Every mistake in how webhook verify was called is a usage error, exit 2
// with nothing on stdout, never a verdict about the request: an empty
// --secret (an unset shell variable) or an empty --secret-env variable
// must not be read as a key, and a file name given as an argument must
// not leave the command reading a request from the terminal. What was
// typed is not echoed: it may be the secret in the wrong place.
func TestWebhookVerifyUsageErrors(t *testing.T) {
	secret := "whsec_usage_test"
	body := []byte(`{"event_id":"evt_1","job_id":"j1","sequence":1,"status":"queued"}`)
	req := signedRequest(t, []byte(secret), body, body)
	env := map[string]string{"WH_SECRET": secret, "WH_EMPTY": ""}
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"empty secret", []string{"--secret", ""}, "--secret"},
		{"empty secret next to a good one", []string{"--secret", secret, "--secret", ""}, "--secret"},
		{"empty secret-env name", []string{"--secret-env", ""}, "--secret-env"},
		{"unset variable", []string{"--secret-env", "WH_UNSET"}, "--secret-env"},
		{"empty variable next to a secret", []string{"--secret", secret, "--secret-env", "WH_EMPTY"}, "--secret-env"},
		{"secret as a variable name", []string{"--secret-env", secret}, "--secret-env"},
		{"zero skew", []string{"--secret", secret, "--skew", "0"}, "--skew"},
		{"negative skew", []string{"--secret", secret, "--skew", "-1m"}, "--skew"},
		{"bad skew", []string{"--secret", secret, "--skew", "soon"}, "-skew"},
		{"unknown flag", []string{"--secret", secret, "--nonce-memory"}, "-nonce-memory"},
		{"file as an argument", []string{"--secret", secret, "saved.http"}, "no argument"},
		{"argument before a flag", []string{"--secret-env", "WH_SECRET", "saved.http", "--skew", "1h"}, "no argument"},
		{"secret as an argument", []string{secret}, "no argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := dispatch(context.Background(), Env{Stdin: bytes.NewReader(req), Stdout: &out, Stderr: &errb,
				Getenv: func(k string) string { return env[k] }}, append([]string{"webhook", "verify"}, tc.args...))
			if code != 2 {
				t.Fatalf("exit %d, want 2; stdout %s stderr %s", code, out.String(), errb.String())
			}
			if out.Len() != 0 {
				t.Fatalf("a usage error printed a verdict: %s", out.String())
			}
			first, _, _ := strings.Cut(errb.String(), "\n")
			if !strings.Contains(first, tc.msg) {
				t.Fatalf("stderr %q does not name %s on its first line", errb.String(), tc.msg)
			}
			if strings.Contains(errb.String(), secret) {
				t.Fatal("the secret was printed")
			}
		})
	}
}
