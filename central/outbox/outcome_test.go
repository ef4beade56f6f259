package outbox

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/ssrf"
	"github.com/vesta-cx/euterpe/daemon"
)

func TestClassify(t *testing.T) {
	now := time.Unix(1700000000, 0)
	date := http.Header{"Retry-After": {now.Add(90 * time.Second).UTC().Format(http.TimeFormat)}}
	cases := []struct {
		name   string
		code   int
		header http.Header
		err    error
		action Action
		wait   time.Duration
	}{
		{"200", 200, nil, nil, Deliver, 0},
		{"204", 204, nil, nil, Deliver, 0},
		{"redirect is a failure", 302, nil, nil, Retry, 0},
		{"400", 400, nil, nil, Retry, 0},
		{"410 gone", 410, nil, nil, DeadLetter, 0},
		{"429 seconds", 429, http.Header{"Retry-After": {"7"}}, nil, RetryAfter, 7 * time.Second},
		{"429 date", 429, date, nil, RetryAfter, 90 * time.Second},
		{"429 bare", 429, nil, nil, RetryAfter, 0},
		{"503", 503, http.Header{"Retry-After": {"junk"}}, nil, RetryAfter, 0},
		{"500", 500, nil, nil, Retry, 0},
		{"timeout", 0, nil, context.DeadlineExceeded, Retry, 0},
		{"refused", 0, nil, &ssrf.RefusedError{Host: "127.0.0.1", Reason: "loopback"}, DeadLetter, 0},
		{"other", 0, nil, errors.New("dial tcp: connection refused"), Retry, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := c.header
			if h == nil {
				h = http.Header{}
			}
			o := classify(c.code, h, c.err, now)
			if o.Action != c.action || o.Wait != c.wait {
				t.Fatalf("got %v wait %s, want %v wait %s", o.Action, o.Wait, c.action, c.wait)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		bad  string
	}{
		{"defaults", func(*Config) {}, ""},
		{"batch 25", func(c *Config) { c.Batch = 25 }, ""},
		{"batch 26", func(c *Config) { c.Batch = 26 }, "EUTERPE_OUTBOX_BATCH"},
		{"poll inverted", func(c *Config) { c.PollMax = c.PollMin / 2 }, "EUTERPE_OUTBOX_POLL_MAX"},
		{"backoff inverted", func(c *Config) { c.BackoffMax = c.BackoffBase / 2 }, "EUTERPE_OUTBOX_BACKOFF_MAX"},
		{"lease too short", func(c *Config) { c.LeaseTTL = c.Timeout }, "EUTERPE_OUTBOX_LEASE_TTL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Defaults()
			c.mod(&cfg)
			err := cfg.Validate()
			var se *daemon.SettingError
			if c.bad == "" && err != nil || c.bad != "" && (!errors.As(err, &se) || se.Setting != c.bad) {
				t.Fatalf("err %v, want setting %q", err, c.bad)
			}
		})
	}
	// Bound settings come from the environment.
	var cfg Config
	dc := daemon.NewConfig("t", func(k string) string {
		return map[string]string{"EUTERPE_OUTBOX_BATCH": "25", "EUTERPE_OUTBOX_BACKOFF_BASE": "1s", "EUTERPE_WEBHOOK_ALLOW_PRIVATE": "true"}[k]
	})
	cfg.Bind(dc)
	if err := dc.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if cfg.Batch != 25 || cfg.BackoffBase != time.Second || cfg.Concurrency != 5 {
		t.Fatalf("bound %+v", cfg)
	}
	// EUTERPE_WEBHOOK_ALLOW_PRIVATE is a serve setting (one policy for the
	// whole process, serve.Deps.Policy); the dispatcher does not read it on
	// its own (TestOnePolicyForEveryRole in central/serve covers it).
	if cfg.AllowPrivate {
		t.Fatal("outbox settings read EUTERPE_WEBHOOK_ALLOW_PRIVATE themselves")
	}
}
