package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listening = regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`)

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
			env := map[string]string{
				"EUTERPE_DATABASE_URL":          sqltest.URL(t, engine),
				"EUTERPE_STATE_DIR":             t.TempDir(),
				"EUTERPE_KEYRING":               "k1:" + credentials.NewKey(),
				"EUTERPE_CENTRAL_ADDR":          "127.0.0.1:0",
				"EUTERPE_CENTRAL_ROLES":         "api,dispatcher",
				"EUTERPE_OUTBOX_POLL_MIN":       "20ms",
				"EUTERPE_OUTBOX_POLL_MAX":       "50ms",
				"EUTERPE_WEBHOOK_ALLOW_PRIVATE": "true",
				"EUTERPE_MAX_REFRESH_ATTEMPTS":  "1",
			}
			getenv := func(k string) string { return env[k] }
			app := serve.NewApp()
			app.Register(outbox.Definition())
			app.AddMigrations(outbox.Migrations())
			cfg := daemon.NewConfig("euterpe-central serve", getenv)
			var s serve.Settings
			app.Bind(cfg, &s)
			if err := cfg.Parse(nil); err != nil {
				t.Fatal(err)
			}
			logs := &syncBuffer{}
			log := slog.New(slog.NewJSONHandler(logs, nil))
			ctx, cancel := context.WithCancel(context.Background())
			d, closeDB, err := app.Open(ctx, s, log, getenv)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Inbox.Policy().MaxRefreshAttempts; got != 1 {
				t.Fatalf("inbox policy MaxRefreshAttempts %d, want 1 from EUTERPE_MAX_REFRESH_ATTEMPTS", got)
			}
			done := make(chan error, 1)
			go func() { done <- app.Serve(ctx, s, d) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("serve: %v", err)
				}
				closeDB()
			}()
			var base string
			deadline := time.Now().Add(10 * time.Second)
			for base == "" {
				if m := listening.FindStringSubmatch(logs.String()); m != nil {
					base = "http://" + m[1]
				} else if time.Now().After(deadline) {
					t.Fatalf("serve did not listen: %s", logs.String())
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}

			// One queued job through the real API.
			req, err := d.Requesters.Create(ctx, "metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(map[string]any{
				"source":     map[string]any{"url": "https://storage.example.com/in.wav?sig=x"},
				"output":     map[string]any{"bucket": "out", "prefix": "p/", "credentials": map[string]any{"access_key_id": "a", "secret_access_key": "b"}},
				"renditions": []any{map[string]any{"name": "hi", "codec": "opus"}},
			})
			hreq, _ := http.NewRequest(http.MethodPost, base+"/transcode", bytes.NewReader(body))
			hreq.Header.Set("Authorization", "Bearer "+req.APIKey)
			hreq.Header.Set("Idempotency-Key", uuid.NewString())
			hreq.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(hreq)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusAccepted {
				t.Fatalf("POST /transcode: %d", res.StatusCode)
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

			var page string
			deadline = time.Now().Add(10 * time.Second)
			for !strings.Contains(page, "\neuterpe_outbox_dead_letter_total 1\n") {
				if time.Now().After(deadline) {
					t.Fatalf("dead-letter counter not 1 in /metrics:\n%s", page)
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
