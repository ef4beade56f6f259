package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"

	"github.com/google/uuid"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

var migrationSets = []sqldb.Migrations{schema.Migrations(), Migrations()}

// eachEngine runs body on Postgres and SQLite with the outbox schema.
func eachEngine(t *testing.T, body func(t *testing.T, db *sqldb.DB)) {
	sqltest.Each(t, migrationSets, body)
}

// fixture is one database with a requester whose secret is known.
type fixture struct {
	db      *sqldb.DB
	keys    *credentials.Keyring
	keySpec string
	req     string
	secret  string
	logs    *testsvc.LogBuffer
}

func newFixture(t testing.TB, db *sqldb.DB) *fixture {
	t.Helper()
	spec := "k1:" + credentials.NewKey()
	keys, err := credentials.ParseKeyring(spec, "")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{db: db, keys: keys, keySpec: spec, req: "req_" + uuid.NewString()[:8], secret: "whsec_test_" + uuid.NewString(), logs: &testsvc.LogBuffer{}}
	sealed, err := keys.Seal([]byte(f.secret), credentials.WebhookSecretAAD(f.req, 1))
	if err != nil {
		t.Fatal(err)
	}
	now := sqldb.Micros(time.Now())
	_, err = db.ExecContext(context.Background(), db.Rebind(`INSERT INTO requesters (id, name, api_key_hash,
		webhook_secret_encrypted, webhook_secret_dek_wrapped, webhook_secret_kek_id, webhook_secret_encryption_version,
		webhook_secret_version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`),
		f.req, "test", "hash-"+f.req, sealed.Ciphertext, sealed.WrappedDEK, sealed.KEKID, sealed.Version, now, now)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// addEvent inserts a pending event as the inbox does, with the payload the
// contract describes, and returns its id.
func (f *fixture) addEvent(t testing.TB, jobID string, seq int64, url string) string {
	t.Helper()
	return f.addEventID(t, "evt_"+uuid.NewString(), jobID, seq, url)
}

func (f *fixture) addEventID(t testing.TB, id, jobID string, seq int64, url string) string {
	t.Helper()
	// Due a second before it was made: a store's estimate of the
	// database clock may run up to half a round trip behind this
	// process's clock, and on a busy machine that is enough to leave an
	// event due "now" unclaimed by a claim made right after it.
	now := time.Now()
	return f.addEventDue(t, id, jobID, seq, url, now, now.Add(-time.Second))
}

// addEventAt is addEventID of an event made and due at now, by the clock
// of the pod that commits it.
func (f *fixture) addEventAt(t testing.TB, id, jobID string, seq int64, url string, now time.Time) string {
	t.Helper()
	return f.addEventDue(t, id, jobID, seq, url, now, now)
}

// addEventDue is addEventAt of an event made at now and due at due.
func (f *fixture) addEventDue(t testing.TB, id, jobID string, seq int64, url string, now, due time.Time) string {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{
		"event_id": id, "job_id": jobID, "sequence": seq, "status": "processing",
		"occurred_at": now.UTC().Format(time.RFC3339Nano),
	})
	_, err := f.db.ExecContext(context.Background(), f.db.Rebind(`INSERT INTO job_outbox_events
		(event_id, job_id, requester_id, sequence, event_type, status, webhook_url, payload, next_attempt_at, created_at)
		VALUES (?, ?, ?, ?, 'job.status', 'pending', ?, ?, ?, ?)`),
		id, jobID, f.req, seq, url, string(payload), sqldb.Micros(due), sqldb.Micros(now))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

type row struct {
	Status   string
	Attempts int
	Code     *int
	LastErr  *string
	Next     int64
}

func (f *fixture) row(t testing.TB, id string) row {
	t.Helper()
	var r row
	err := f.db.QueryRowContext(context.Background(), f.db.Rebind(
		`SELECT status, attempt_count, last_status_code, last_error, next_attempt_at FROM job_outbox_events WHERE event_id = ?`), id).
		Scan(&r.Status, &r.Attempts, &r.Code, &r.LastErr, &r.Next)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testConfig is fast: tiny backoff and polls, short timeout.
func testConfig() Config {
	c := Defaults()
	c.PollMin, c.PollMax = 20*time.Millisecond, 60*time.Millisecond
	c.BackoffBase, c.BackoffMax = 5*time.Millisecond, 50*time.Millisecond
	c.Timeout = 500 * time.Millisecond
	c.LeaseTTL = 2 * time.Second
	c.AllowPrivate = true
	return c
}

// start runs a dispatcher until the test ends.
func (f *fixture) start(t *testing.T, cfg Config, worker string) (*Dispatcher, *Metrics) {
	t.Helper()
	m := NewMetrics(nil)
	d, err := New(cfg, Options{
		Store: NewStore(f.db, nil), Secrets: &RequesterSecrets{Requesters: requesters.New(f.db, f.keys), TTL: 50 * time.Millisecond},
		Worker: worker, Metrics: m, Log: slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	})
	return d, m
}

// receipt is one request as a receiver saw it.
type receipt struct {
	Header http.Header
	Body   []byte
	At     time.Time
}

// receiver is a webhook endpoint on loopback whose answers the test scripts.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	got      []receipt
	answer   func(n int, r *http.Request, body []byte) int // n counts requests from 1
	inflight map[string]int
	overlap  int // concurrent requests for one event id, ever
}

func newReceiver(t *testing.T, answer func(n int, r *http.Request, body []byte) int) *receiver {
	rc := &receiver{answer: answer, inflight: map[string]int{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id := r.Header.Get(webhook.HeaderEventID)
	rc.mu.Lock()
	rc.got = append(rc.got, receipt{Header: r.Header.Clone(), Body: body, At: time.Now()})
	n := len(rc.got)
	rc.inflight[id]++
	if rc.inflight[id] > 1 {
		rc.overlap++
	}
	rc.mu.Unlock()
	code := http.StatusNoContent
	if rc.answer != nil {
		code = rc.answer(n, r, body)
	}
	rc.mu.Lock()
	rc.inflight[id]--
	rc.mu.Unlock()
	w.WriteHeader(code)
}

func (rc *receiver) receipts() []receipt {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]receipt(nil), rc.got...)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) waitStatus(t testing.TB, id, status string) row {
	t.Helper()
	var r row
	waitFor(t, fmt.Sprintf("event %s to be %s", id, status), 15*time.Second, func() bool {
		r = f.row(t, id)
		return r.Status == status
	})
	return r
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}
