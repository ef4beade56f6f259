package serve_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestTranscodeAPIAnswers503WhileTheDatabaseIsDown: a requester's call that
// finds the database gone is 503 "unavailable" with Retry-After, which the
// requester retries, not a 500 it would read as a bug; the answer names
// no internals, and the log keeps the detail.
func TestTranscodeAPIAnswers503WhileTheDatabaseIsDown(t *testing.T) {
	for _, engine := range sqltest.Engines {
		t.Run(string(engine), func(t *testing.T) {
			st := startServe(t, serve.NewApp(), serveEnv(t, engine, map[string]string{"EUTERPE_CENTRAL_ROLES": "api"}), nil)
			req, err := st.deps.Requesters.Create(context.Background(), "outage")
			if err != nil {
				t.Fatal(err)
			}
			_ = st.deps.DB.Close()

			job := map[string]any{
				"source":     map[string]any{"url": "https://storage.example.com/in.wav?sig=x"},
				"output":     map[string]any{"bucket": "out", "prefix": "p/", "credentials": map[string]any{"access_key_id": "a", "secret_access_key": "b"}},
				"renditions": []any{map[string]any{"name": "hi", "codec": "opus"}},
			}
			code, body := st.postJob(t, req.APIKey, job)
			if code != http.StatusServiceUnavailable {
				t.Fatalf("POST /transcode with the database down: %d %s", code, body)
			}
			var answer struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(body, &answer); err != nil || answer.Error.Code != "unavailable" {
				t.Fatalf("answer %s (%v)", body, err)
			}
			if strings.Contains(answer.Error.Message, "sql:") {
				t.Errorf("the answer names internals: %s", body)
			}

			const id = "0b7f3c2e-8d1a-4c55-9a6e-3f1d2c4b5a69"
			for _, call := range []struct{ method, path, body string }{
				{http.MethodGet, "/transcode/status?job_id=" + id, ""},
				{http.MethodPut, "/transcode/credentials?job_id=" + id, `{"credentials":{"access_key_id":"a","secret_access_key":"b"}}`},
			} {
				r, _ := http.NewRequest(call.method, st.base+call.path, strings.NewReader(call.body))
				r.Header.Set("Authorization", "Bearer "+req.APIKey)
				r.Header.Set("Content-Type", "application/json")
				res, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "5" {
					t.Fatalf("%s %s with the database down: %d Retry-After %q", call.method, call.path, res.StatusCode, res.Header.Get("Retry-After"))
				}
			}
			if !strings.Contains(st.logs.String(), "a store is unavailable") {
				t.Errorf("the outage is not logged:\n%s", st.logs.String())
			}
		})
	}
}
