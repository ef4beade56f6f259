package outbox

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestUnopenableSecretDeadLetters: an event whose requester's signing
// secret cannot be opened (its KEK removed from the keyring, or a corrupt
// blob) counts its attempts like any failed delivery and is dead-lettered
// when they are spent, with an "alert":true log naming the cause; the
// job's later events are then no longer held back by per-job order.
func TestUnopenableSecretDeadLetters(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		for _, tc := range []struct {
			name   string
			break_ func(f *fixture) *credentials.Keyring
			cause  string
		}{
			{"kek removed from the keyring", func(f *fixture) *credentials.Keyring {
				other, err := credentials.ParseKeyring("k2:"+credentials.NewKey(), "")
				if err != nil {
					t.Fatal(err)
				}
				return other
			}, "k1"},
			{"corrupt blob", func(f *fixture) *credentials.Keyring {
				if _, err := db.Exec(db.Rebind(`UPDATE requesters SET webhook_secret_encrypted = ? WHERE id = ?`), []byte("garbage-garbage-garbage-garbage"), f.req); err != nil {
					t.Fatal(err)
				}
				return f.keys
			}, "signing secret unavailable"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := newFixture(t, db)
				keys := tc.break_(f)
				rc := newReceiver(t, nil)
				cfg := testConfig()
				cfg.MaxAttempts = 3
				m := NewMetrics(nil)
				d, err := New(cfg, Options{Store: NewStore(db, nil), Secrets: &RequesterSecrets{Requesters: requesters.New(db, keys)},
					Worker: "w", Metrics: m, Log: slog.New(slog.NewJSONHandler(f.logs, nil))})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- d.Run(ctx) }()
				defer func() { cancel(); <-done }()
				job := "job_" + strings.ReplaceAll(tc.name, " ", "_")
				first := f.addEvent(t, job, 1, rc.URL)
				second := f.addEvent(t, job, 2, rc.URL)
				r := f.waitStatus(t, first, "dead_letter")
				if r.Attempts != 3 || r.LastErr == nil || !strings.Contains(*r.LastErr, "signing secret unavailable") {
					t.Fatalf("first event %+v", r)
				}
				f.waitStatus(t, second, "dead_letter")
				if n := len(rc.receipts()); n != 0 {
					t.Fatalf("%d unsigned requests reached the receiver", n)
				}
				var alerted bool
				for _, line := range strings.Split(f.logs.String(), "\n") {
					if strings.Contains(line, `"alert":true`) && strings.Contains(line, first) && strings.Contains(line, tc.cause) {
						alerted = true
					}
				}
				if !alerted {
					t.Fatalf("no alert naming %q for %s:\n%s", tc.cause, first, f.logs.String())
				}
				if strings.Contains(f.logs.String(), f.secret) {
					t.Fatal("log leaks the secret")
				}
			})
		}
	})
}

// TestLargerBucketHasAFloor: a 429 or 503 is retried from the larger
// bucket, never sooner than the longest wait a plain failure of the same
// attempt could draw (the backoff ceiling), even when the jitter draws zero
// (below the cap, as here: at the cap the larger bucket is [Cap/2, Cap)).
// A Retry-After is a least wait: a short one does not bring the retry
// forward (contract §5: 429 takes the larger bucket).
func TestLargerBucketHasAFloor(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		for _, tc := range []struct {
			code       int
			retryAfter string
		}{{429, ""}, {503, ""}, {429, "1"}, {503, "1"}} {
			rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(tc.code)
			}))
			t.Cleanup(rc.Close)
			cfg := testConfig()
			cfg.BackoffBase, cfg.BackoffMax = 4*time.Second, time.Minute
			d, err := New(cfg, Options{Store: NewStore(db, nil), Secrets: &RequesterSecrets{Requesters: requesters.New(db, f.keys)}, Worker: "w"})
			if err != nil {
				t.Fatal(err)
			}
			d.backoff.Rand = func() float64 { return 0 }
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			t.Cleanup(cancel)
			id := f.addEvent(t, "job_"+strconv.Itoa(tc.code)+"_"+tc.retryAfter, 1, rc.URL)
			var r row
			waitFor(t, "the first attempt recorded", 10*time.Second, func() bool { r = f.row(t, id); return r.Attempts == 1 && r.Status == "pending" })
			cancel()
			<-done
			wait := time.Until(sqldb.FromMicros(r.Next))
			floor := cfg.BackoffBase - time.Second // less the time the test took
			if wait < floor {
				t.Fatalf("%d (Retry-After %q): next attempt in %s, want at least %s", tc.code, tc.retryAfter, wait, floor)
			}
		}
	})
}

// TestAttemptCeilingHasOneSource: the delivery attempt ceiling is the
// dispatcher's setting alone; job_outbox_events carries no per-row copy
// that could disagree with it (migration 00002 drops the unread column).
func TestAttemptCeilingHasOneSource(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		if _, err := db.Exec(`SELECT max_attempts FROM job_outbox_events`); err == nil {
			t.Fatal("job_outbox_events still has a max_attempts column nothing reads")
		}
	})
}

// failingSecrets is a SecretSource whose reads fail the way a database
// outage makes them fail.
type failingSecrets struct{}

func (failingSecrets) Secrets(context.Context, string, time.Time) ([][]byte, error) {
	return nil, errors.New("requesters: read secrets: connection refused")
}

// TestUnreadableSecretDoesNotAlert: a signing secret that could not be read
// (the database, not the secret) costs the attempt like any failure but
// heals by itself, so it is logged without "alert":true; only a secret that
// cannot be opened pages the operator (TestUnopenableSecretDeadLetters).
func TestUnreadableSecretDoesNotAlert(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, nil)
		cfg := testConfig()
		cfg.BackoffBase, cfg.BackoffMax = time.Minute, time.Minute // one attempt to look at
		d, err := New(cfg, Options{Store: NewStore(db, nil), Secrets: failingSecrets{}, Worker: "w",
			Log: slog.New(slog.NewJSONHandler(f.logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		defer func() { cancel(); <-done }()
		id := f.addEvent(t, "job_unreadable", 1, rc.URL)
		waitFor(t, "the failed attempt recorded", 10*time.Second, func() bool { r := f.row(t, id); return r.Attempts == 1 && r.Status == "pending" })
		logs := f.logs.String()
		if strings.Contains(logs, `"alert":true`) {
			t.Fatalf("a failed read of the secret alerted:\n%s", logs)
		}
		if !strings.Contains(logs, "webhook signing secret could not be read") {
			t.Fatalf("the failed read was not logged:\n%s", logs)
		}
	})
}
