package serve_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// recorder is an HTTP endpoint that records every request and answers
// with answer(n) (n counts requests from 1).
type recorder struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []recorded
	answer func(n int) (int, string)
}

type recorded struct {
	URL    string
	Header http.Header
	Body   string
}

func newRecorder(t *testing.T, answer func(n int) (int, string)) *recorder {
	rc := &recorder{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, recorded{URL: r.URL.String(), Header: r.Header.Clone(), Body: string(body)})
		n := len(rc.reqs)
		rc.mu.Unlock()
		code, text := rc.answer(n)
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, text)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *recorder) requests() []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]recorded(nil), rc.reqs...)
}

// column returns every non-NULL value of a text column.
func column(t *testing.T, db *sqldb.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s *string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		if s != nil {
			out = append(out, *s)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPlantedSecretNeverLeaksFromServe runs serve with the api, runner
// and dispatcher roles (debug logging) on each engine and enqueues two jobs
// carrying a planted secret: one in a signed source URL's query, one in
// S3 source credentials (secret key and session token), both in the output
// credentials and in the query of refresh_url. Storage answers 403 to every request, refresh_url answers
// 500, so each job spends its refresh budget and its attempts and ends in
// dead_letter; the status webhook receiver answers 500, then 503, then 200. The
// planted secret must appear in no log line (debug included), no
// last_error of a job or an outbox event, no outbox payload, no body the
// webhook or refresh endpoints received, and no API response; nor does
// the requester's API key or webhook secret.
func TestPlantedSecretNeverLeaksFromServe(t *testing.T) {
	testsvc.Program(t, "ffmpeg")
	testsvc.Program(t, "ffprobe")
	for _, engine := range sqltest.Engines {
		t.Run(string(engine), func(t *testing.T) {
			planted := "PLANTED-" + strings.ReplaceAll(uuid.NewString(), "-", "")
			source := newRecorder(t, func(int) (int, string) {
				return http.StatusForbidden, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>`
			})
			refresh := newRecorder(t, func(int) (int, string) { return http.StatusInternalServerError, "refresh backend down" })
			// 500, then 503 with Retry-After (so the failed event's
			// last_error is stored for a second and seen below), then 200.
			hook := newRecorder(t, func(n int) (int, string) {
				switch n {
				case 1:
					return http.StatusInternalServerError, "receiver down"
				case 2:
					return http.StatusServiceUnavailable, "receiver busy"
				}
				return http.StatusOK, "ok"
			})

			env := serveEnv(t, engine, map[string]string{
				"EUTERPE_CENTRAL_ROLES":          "api,runner,dispatcher",
				"EUTERPE_LOG_LEVEL":              "debug",
				"EUTERPE_WEBHOOK_ALLOW_PRIVATE":  "true",
				"EUTERPE_MAX_ATTEMPTS":           "2",
				"EUTERPE_MAX_REFRESH_ATTEMPTS":   "1",
				"EUTERPE_RETRY_BACKOFF_BASE":     "10ms",
				"EUTERPE_RETRY_BACKOFF_MAX":      "50ms",
				"EUTERPE_RUNNER_TEMP_DIR":        t.TempDir(),
				"EUTERPE_RUNNER_POLL_INTERVAL":   "20ms",
				"EUTERPE_RUNNER_REFRESH_WAIT":    "100ms",
				"EUTERPE_RUNNER_STORAGE_TIMEOUT": "5s",
				"EUTERPE_OUTBOX_POLL_MIN":        "20ms",
				"EUTERPE_OUTBOX_POLL_MAX":        "50ms",
				"EUTERPE_OUTBOX_BACKOFF_BASE":    "10ms",
				"EUTERPE_OUTBOX_BACKOFF_MAX":     "2s", // Retry-After: 1 is honoured in full
			})
			app := serve.NewApp()
			app.Register(runner.Definition())
			app.Register(outbox.Definition())
			app.AddMigrations(outbox.Migrations())
			st := startServe(t, app, env, nil)
			d, ctx := st.deps, context.Background()
			req, err := d.Requesters.Create(ctx, "planted")
			if err != nil {
				t.Fatal(err)
			}

			output := map[string]any{"bucket": "output-out", "prefix": "p/", "endpoint": source.URL, "region": "us-east-1",
				"credentials": map[string]any{"access_key_id": "AKIAOUTPUT", "secret_access_key": planted, "session_token": planted}}
			jobs := map[string]map[string]any{
				"signed url": {
					"source": map[string]any{"url": source.URL + "/in.wav?X-Amz-Credential=AKIASIGNED&X-Amz-Signature=" + planted + "&token=" + planted},
				},
				"s3 credentials": {
					"source": map[string]any{"bucket": "source-in", "key": "a.wav", "endpoint": source.URL, "region": "us-east-1",
						"credentials": map[string]any{"access_key_id": "AKIASOURCE", "secret_access_key": planted, "session_token": planted}},
				},
			}
			var responses []string
			var ids []string
			for name, job := range jobs {
				job["output"] = output
				job["renditions"] = []any{map[string]any{"name": "hi", "codec": "opus"}}
				job["status_webhook_url"] = hook.URL + "/hook"
				job["refresh_url"] = refresh.URL + "/refresh?token=" + planted
				code, body := st.postJob(t, req.APIKey, job)
				if code != http.StatusAccepted {
					t.Fatalf("%s: POST /transcode %d %s", name, code, body)
				}
				responses = append(responses, string(body))
				var acc struct {
					JobID string `json:"job_id"`
				}
				if err := json.Unmarshal(body, &acc); err != nil || acc.JobID == "" {
					t.Fatalf("%s: %s", name, body)
				}
				ids = append(ids, acc.JobID)
			}

			// Both jobs end in dead_letter, and every event is delivered. A
			// delivery clears the event's last_error, so every value the
			// error columns take on the way is collected.
			errorsSeen := map[string]bool{}
			var jobErrors, eventErrors []string
			collect := func() {
				for _, c := range []struct {
					q    string
					into *[]string
				}{
					{`SELECT last_error FROM inbox_jobs`, &jobErrors},
					{`SELECT last_error FROM job_outbox_events`, &eventErrors},
				} {
					for _, v := range column(t, d.DB, c.q) {
						if !errorsSeen[c.q+v] {
							errorsSeen[c.q+v] = true
							*c.into = append(*c.into, v)
						}
					}
				}
			}
			st.waitFor(t, "both jobs dead-lettered and every event delivered", func() bool {
				collect()
				var dead, open int
				_ = d.DB.QueryRow(`SELECT COUNT(*) FROM inbox_jobs WHERE status = 'dead_letter'`).Scan(&dead)
				_ = d.DB.QueryRow(`SELECT COUNT(*) FROM job_outbox_events WHERE status <> 'delivered'`).Scan(&open)
				return dead == len(ids) && open == 0
			})

			// The failure paths really ran, and the secret really went out
			// to storage (so its absence below means something).
			if n := len(refresh.requests()); n < len(ids) {
				t.Fatalf("refresh_url called %d times for %d jobs", n, len(ids))
			}
			hookReqs := hook.requests()
			var hookBodies []string
			deadEvents := 0
			for _, r := range hookReqs {
				hookBodies = append(hookBodies, r.Body)
				if strings.Contains(r.Body, `"status":"dead_letter"`) {
					deadEvents++
				}
			}
			if deadEvents < len(ids) {
				t.Fatalf("receiver saw %d dead_letter events for %d jobs", deadEvents, len(ids))
			}
			sawSigned, sawS3 := false, false
			for _, r := range source.requests() {
				sawSigned = sawSigned || strings.Contains(r.URL, planted)
				sawS3 = sawS3 || strings.Contains(r.Header.Get("Authorization"), "AKIASOURCE")
			}
			if !sawSigned || !sawS3 {
				t.Fatalf("storage never saw the signed URL (%v) or the S3 credentials (%v)", sawSigned, sawS3)
			}
			collect()
			if len(column(t, d.DB, `SELECT last_error FROM inbox_jobs`)) != len(ids) || len(eventErrors) == 0 {
				t.Fatalf("last_error: %d job values, %d event values seen; want every job's and the refused delivery's", len(jobErrors), len(eventErrors))
			}
			if !strings.Contains(st.logs.String(), `"msg":"outbox delivery failed; will retry"`) {
				t.Fatal("the receiver's 500 did not lead to a retry")
			}
			for _, id := range ids {
				res, err := http.NewRequest(http.MethodGet, st.base+"/transcode/status?job_id="+id, nil)
				if err != nil {
					t.Fatal(err)
				}
				res.Header.Set("Authorization", "Bearer "+req.APIKey)
				resp, err := http.DefaultClient.Do(res)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				responses = append(responses, string(b))
			}
			logs := st.logs.String()
			if !strings.Contains(logs, `"level":"DEBUG"`) {
				t.Fatalf("no debug line logged: EUTERPE_LOG_LEVEL=debug did not apply")
			}

			var refreshBodies []string
			for _, r := range refresh.requests() {
				refreshBodies = append(refreshBodies, r.Body)
			}
			for _, where := range []struct {
				name   string
				values []string
			}{
				{"the log", []string{logs}},
				{"inbox_jobs.last_error", jobErrors},
				{"job_outbox_events.last_error", eventErrors},
				{"job_outbox_events.payload", column(t, d.DB, `SELECT payload FROM job_outbox_events`)},
				{"webhook bodies received", hookBodies},
				{"refresh bodies received", refreshBodies},
				{"API responses", responses},
			} {
				for _, v := range where.values {
					if strings.Contains(v, planted) {
						t.Errorf("the planted secret is in %s: %s", where.name, v)
					}
					// The requester's own secrets went out too: the API
					// key with every request, the webhook secret signing
					// every delivery and refresh call.
					for _, secret := range []string{req.APIKey, req.WebhookSecret} {
						if strings.Contains(v, secret) {
							t.Errorf("a requester secret is in %s: %s", where.name, v)
						}
					}
				}
			}
		})
	}
}
