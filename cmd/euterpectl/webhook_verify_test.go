package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
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
