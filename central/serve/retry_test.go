package serve_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// parseSettings binds and parses the core settings from env alone.
func parseSettings(env map[string]string) (serve.Settings, error) {
	var s serve.Settings
	cfg := daemon.NewConfig("t", func(k string) string { return env[k] })
	serve.NewApp().Bind(cfg, &s)
	return s, cfg.Parse(nil)
}

// TestRetryBackoffSettingsDefaultsAndChecks: without settings the inbox
// policy serve builds has the contract's buckets; a cap below its base
// stops the command with a *daemon.SettingError naming the cap.
func TestRetryBackoffSettingsDefaultsAndChecks(t *testing.T) {
	s, err := parseSettings(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, want := s.InboxPolicy(), inbox.DefaultPolicy()
	if got.Backoff.Base != want.Backoff.Base || got.Backoff.Cap != want.Backoff.Cap ||
		got.RateLimited.Base != want.RateLimited.Base || got.RateLimited.Cap != want.RateLimited.Cap ||
		got.MaxAttempts != want.MaxAttempts || got.MaxRefreshAttempts != want.MaxRefreshAttempts {
		t.Fatalf("default policy %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		setting string
	}{
		{"retry cap below base", map[string]string{serve.EnvRetryBackoffBase: "10s", serve.EnvRetryBackoffMax: "5s"}, serve.EnvRetryBackoffMax},
		{"retry cap below default base", map[string]string{serve.EnvRetryBackoffMax: "1s"}, serve.EnvRetryBackoffMax},
		{"429 cap below base", map[string]string{serve.EnvRateLimitedBase: "1h", serve.EnvRateLimitedMax: "30m"}, serve.EnvRateLimitedMax},
		{"429 cap below default base", map[string]string{serve.EnvRateLimitedMax: "10s"}, serve.EnvRateLimitedMax},
		{"retry base out of range", map[string]string{serve.EnvRetryBackoffBase: "0s"}, serve.EnvRetryBackoffBase},
		{"not a duration", map[string]string{serve.EnvRateLimitedBase: "soon"}, serve.EnvRateLimitedBase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSettings(tc.env)
			var se *daemon.SettingError
			if !errors.As(err, &se) || se.Setting != tc.setting {
				t.Fatalf("err %v, want a *daemon.SettingError naming %s", err, tc.setting)
			}
		})
	}
	// Equal base and cap is allowed (a fixed ceiling).
	if _, err := parseSettings(map[string]string{serve.EnvRetryBackoffBase: "3s", serve.EnvRetryBackoffMax: "3s"}); err != nil {
		t.Fatalf("base = cap: %v", err)
	}
}

// TestRetryBackoffSettingsReachInbox runs serve on each engine with the
// four retry settings and checks the inbox policy serve built: its buckets
// are the configured ones, and a 429 failure of a real job is scheduled from
// the configured rate-limited bucket (base = cap = 2h: due in exactly 2 h),
// a retryable one within the configured retry cap.
func TestRetryBackoffSettingsReachInbox(t *testing.T) {
	for _, engine := range sqltest.Engines {
		t.Run(string(engine), func(t *testing.T) {
			env := serveEnv(t, engine, map[string]string{
				"EUTERPE_CENTRAL_ROLES":   "api",
				serve.EnvRetryBackoffBase: "20ms",
				serve.EnvRetryBackoffMax:  "40ms",
				serve.EnvRateLimitedBase:  "2h",
				serve.EnvRateLimitedMax:   "2h",
			})
			st := startServe(t, serve.NewApp(), env, nil)
			d, ctx := st.deps, context.Background()
			p := d.Inbox.Policy()
			if p.Backoff.Base != 20*time.Millisecond || p.Backoff.Cap != 40*time.Millisecond ||
				p.RateLimited.Base != 2*time.Hour || p.RateLimited.Cap != 2*time.Hour {
				t.Fatalf("inbox policy buckets %+v / %+v", p.Backoff, p.RateLimited)
			}
			req, err := d.Requesters.Create(ctx, "retry")
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				class    inbox.Class
				min, max time.Duration
			}{
				{inbox.RateLimited, 2 * time.Hour, 2 * time.Hour},
				{inbox.Retryable, 0, 40 * time.Millisecond},
			} {
				id := inbox.NewJobID()
				err := d.Inbox.Enqueue(ctx, inbox.NewJob{ID: id, RequesterID: req.RequesterID,
					Source:      inbox.Source{URL: "https://storage.example.com/a.wav"},
					Output:      inbox.Output{Bucket: "b", Prefix: "p/"},
					Renditions:  []inbox.Rendition{{Name: "a", Codec: "opus"}},
					Credentials: credentials.Storage{Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "s"}}})
				if err != nil {
					t.Fatal(err)
				}
				jobs, err := d.Inbox.Claim(ctx, "w", 1, time.Minute)
				if err != nil || len(jobs) != 1 || jobs[0].ID != id {
					t.Fatalf("claim: %v %d", err, len(jobs))
				}
				before := d.Inbox.Now() // the store keeps the database's time
				status, err := d.Inbox.Fail(ctx, jobs[0], inbox.JobError{Class: tc.class, Code: "storage_error", Message: "test"})
				after := d.Inbox.Now()
				if err != nil || status != "queued" {
					t.Fatalf("%s: fail -> %s, %v", tc.class, status, err)
				}
				v, err := d.Inbox.Get(ctx, id)
				if err != nil || v.NextAttemptAt == nil {
					t.Fatalf("%s: get: %v", tc.class, err)
				}
				// next_attempt_at is stored in microseconds: allow 1 µs of rounding.
				lo, hi := before.Add(tc.min-time.Microsecond), after.Add(tc.max+time.Microsecond)
				if v.NextAttemptAt.Before(lo) || v.NextAttemptAt.After(hi) {
					t.Fatalf("%s: next attempt %s, want within [%s, %s]", tc.class, v.NextAttemptAt, lo, hi)
				}
			}
		})
	}
}
