package serve_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestServeMetrics runs serve (api + dispatcher) on each engine, accepts a
// job through the API, lets the dispatcher dead-letter an event its
// receiver answers 410 Gone, and scrapes GET /metrics: the dispatcher's
// counters are registered on the serve registry (the dead-letter counter is
// 1) and the queue gauges report the database's state. It also checks that
// EUTERPE_MAX_REFRESH_ATTEMPTS lands in the inbox policy.
func TestServeMetrics(t *testing.T) {
	for _, engine := range sqltest.Engines {
		t.Run(string(engine), func(t *testing.T) {
			gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusGone)
			}))
			defer gone.Close()
			env := serveEnv(t, engine, map[string]string{
				"EUTERPE_CENTRAL_ROLES":         "api,dispatcher",
				"EUTERPE_OUTBOX_POLL_MIN":       "20ms",
				"EUTERPE_OUTBOX_POLL_MAX":       "50ms",
				"EUTERPE_WEBHOOK_ALLOW_PRIVATE": "true",
				"EUTERPE_MAX_REFRESH_ATTEMPTS":  "1",
			})
			app := serve.NewApp()
			app.Register(outbox.Definition())
			app.AddMigrations(outbox.Migrations())
			st := startServe(t, app, env, nil)
			d, base, ctx, logs := st.deps, st.base, context.Background(), st.logs
			if got := d.Inbox.Policy().MaxRefreshAttempts; got != 1 {
				t.Fatalf("inbox policy MaxRefreshAttempts %d, want 1 from EUTERPE_MAX_REFRESH_ATTEMPTS", got)
			}

			// One queued job through the real API.
			req, err := d.Requesters.Create(ctx, "metrics")
			if err != nil {
				t.Fatal(err)
			}
			code, body := st.postJob(t, req.APIKey, map[string]any{
				"source":     map[string]any{"url": "https://storage.example.com/in.wav?sig=x"},
				"output":     map[string]any{"bucket": "out", "prefix": "p/", "credentials": map[string]any{"access_key_id": "a", "secret_access_key": "b"}},
				"renditions": []any{map[string]any{"name": "hi", "codec": "opus"}},
			})
			if code != http.StatusAccepted {
				t.Fatalf("POST /transcode: %d %s", code, body)
			}

			// An event whose receiver answers 410 Gone: dead-lettered at once.
			now := sqldb.Micros(time.Now())
			_, err = d.DB.ExecContext(ctx, d.DB.Rebind(`INSERT INTO job_outbox_events
				(event_id, job_id, requester_id, sequence, event_type, status, webhook_url, payload, next_attempt_at, created_at)
				VALUES (?, ?, ?, 1, 'job.status', 'pending', ?, '{}', ?, ?)`),
				uuid.NewString(), uuid.NewString(), req.RequesterID, gone.URL, now, now)
			if err != nil {
				t.Fatal(err)
			}

			// The registry gathers collectors concurrently, so one scrape
			// can read the queue gauges before the dead-letter commit and
			// the counter after it: wait until both agree.
			var page string
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(page, "\neuterpe_outbox_dead_letter_total 1\n") ||
				!strings.Contains(page, `euterpe_outbox_events{status="dead_letter"} 1`) {
				if time.Now().After(deadline) {
					t.Fatalf("dead-letter counter and gauge not both 1 in /metrics:\n%s", page)
				}
				time.Sleep(20 * time.Millisecond)
				page = scrape(t, base)
			}
			for _, want := range []string{
				`euterpe_inbox_jobs{status="queued"} 1`,
				`euterpe_inbox_jobs{status="processing"} 0`,
				`euterpe_outbox_events{status="dead_letter"} 1`,
				`euterpe_outbox_events{status="pending"} 0`,
				`euterpe_outbox_attempts_total{outcome="dead_letter"} 1`,
				"euterpe_inbox_oldest_queued_age_seconds ",
				"euterpe_outbox_request_seconds_count 1",
				"go_goroutines ",
				"process_start_time_seconds ",
			} {
				if !strings.Contains(page, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			if strings.Contains(logs.String(), `"level":"WARN","msg":"metrics:`) {
				t.Errorf("a metrics query failed: %s", logs.String())
			}
		})
	}
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", res.StatusCode, b)
	}
	return string(b)
}
