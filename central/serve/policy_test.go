package serve_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestOnePolicyForEveryRole: EUTERPE_WEBHOOK_ALLOW_PRIVATE is one serve
// setting, read once (here from the flag, with nothing in the environment)
// and applied alike by the API's enqueue check, the runner (storage
// requests) and the dispatcher (webhook deliveries). With the flag a
// loopback callback URL is accepted, the runner fetches a loopback source
// and the dispatcher reaches a loopback receiver; without it the API
// answers 400 and the runner never connects to the loopback source.
func TestOnePolicyForEveryRole(t *testing.T) {
	testsvc.Program(t, "ffmpeg")
	testsvc.Program(t, "ffprobe")
	for _, engine := range sqltest.Engines {
		for _, tc := range []struct {
			name  string
			args  []string
			allow bool
		}{
			{"flag", []string{"-webhook-allow-private=true"}, true},
			{"default", nil, false},
		} {
			t.Run(string(engine)+"/"+tc.name, func(t *testing.T) {
				var sourceHits, hookHits atomic.Int32
				source := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					sourceHits.Add(1)
					http.NotFound(w, r)
				}))
				defer source.Close()
				hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hookHits.Add(1)
					w.WriteHeader(http.StatusNoContent)
				}))
				defer hook.Close()

				env := serveEnv(t, engine, map[string]string{
					"EUTERPE_CENTRAL_ROLES":        "api,runner,dispatcher",
					"EUTERPE_RUNNER_TEMP_DIR":      t.TempDir(),
					"EUTERPE_RUNNER_POLL_INTERVAL": "20ms",
					"EUTERPE_OUTBOX_POLL_MIN":      "20ms",
					"EUTERPE_OUTBOX_POLL_MAX":      "50ms",
				})
				app := serve.NewApp()
				app.Register(runner.Definition())
				app.Register(outbox.Definition())
				app.AddMigrations(outbox.Migrations())
				st := startServe(t, app, env, tc.args)
				d, ctx := st.deps, context.Background()
				if d.Policy.AllowPrivate != tc.allow {
					t.Fatalf("Deps.Policy.AllowPrivate %v, want %v", d.Policy.AllowPrivate, tc.allow)
				}
				req, err := d.Requesters.Create(ctx, "policy")
				if err != nil {
					t.Fatal(err)
				}
				post := func(webhook string) (int, string, string) {
					t.Helper()
					job := map[string]any{
						"source":     map[string]any{"url": source.URL + "/in.wav?sig=x"},
						"output":     map[string]any{"bucket": "out", "prefix": "p/", "credentials": map[string]any{"access_key_id": "a", "secret_access_key": "b"}},
						"renditions": []any{map[string]any{"name": "hi", "codec": "opus"}},
					}
					if webhook != "" {
						job["status_webhook_url"] = webhook
					}
					code, body := st.postJob(t, req.APIKey, job)
					var acc struct {
						JobID string `json:"job_id"`
					}
					_ = json.Unmarshal(body, &acc)
					return code, string(body), acc.JobID
				}

				code, body, _ := post(hook.URL + "/hook")
				if tc.allow {
					if code != http.StatusAccepted {
						t.Fatalf("loopback status_webhook_url with the flag: %d %s", code, body)
					}
					st.waitFor(t, "runner fetches the loopback source", func() bool { return sourceHits.Load() > 0 })
					st.waitFor(t, "dispatcher reaches the loopback receiver", func() bool { return hookHits.Load() > 0 })
					return
				}
				if code != http.StatusBadRequest || !strings.Contains(body, "status_webhook_url") {
					t.Fatalf("loopback status_webhook_url without the flag: %d %s", code, body)
				}
				code, body, jobID := post("")
				if code != http.StatusAccepted {
					t.Fatalf("job without callback: %d %s", code, body)
				}
				st.waitFor(t, "the runner's attempt is recorded", func() bool {
					v, err := d.Inbox.Get(ctx, jobID)
					return err == nil && v.LastError != nil
				})
				if n := sourceHits.Load(); n != 0 {
					t.Fatalf("the runner connected to a loopback source %d times without the flag", n)
				}
			})
		}
	}
}
