package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const plantedSecret = "PLANTED-SECRET-wJalrXUtnFEMI-K7MDENG"

func testKeys(t testing.TB) *credentials.Keyring {
	k, err := credentials.ParseKeyring("k1:"+credentials.NewKey(), "")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func eachEngine(t *testing.T, body func(t *testing.T, db *sqldb.DB)) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, body)
}

func addRequester(t testing.TB, db *sqldb.DB) string {
	t.Helper()
	id := uuid.NewString()
	err := db.Tx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(db.Rebind(`INSERT INTO requesters (id, name, api_key_hash, webhook_secret_encrypted,
			webhook_secret_dek_wrapped, webhook_secret_kek_id, webhook_secret_encryption_version, created_at, updated_at)
			VALUES (?, 'test', ?, ?, ?, 'k1', 1, 0, 0)`), id, "hash-"+id, []byte{1}, []byte{1})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newJob(requester string, webhook bool) inbox.NewJob {
	j := inbox.NewJob{
		ID:          inbox.NewJobID(),
		RequesterID: requester,
		Source:      inbox.Source{Bucket: "in", Key: "a.wav", Region: "auto"},
		Output:      inbox.Output{Bucket: "out", Prefix: "p/"},
		Renditions:  []inbox.Rendition{{Name: "hi", Codec: "opus", BitrateKbps: 128}},
		Metadata:    []byte(`{"track":"t1"}`),
		Credentials: credentials.Storage{
			Source: &credentials.S3{AccessKeyID: "AKIA1", SecretAccessKey: plantedSecret},
			Output: credentials.S3{AccessKeyID: "AKIA2", SecretAccessKey: plantedSecret, SessionToken: plantedSecret},
		},
	}
	if webhook {
		j.StatusWebhookURL = "https://example.com/hook"
	}
	return j
}

func enqueue(t testing.TB, s *inbox.Store, requester string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		j := newJob(requester, i%2 == 0)
		ids[i] = j.ID
		if err := s.Enqueue(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

type eventRow struct {
	JobID, Status, EventType, Payload string
	Seq                               int64
}

func events(t testing.TB, db *sqldb.DB, jobID string) []eventRow {
	t.Helper()
	rows, err := db.Query(db.Rebind(`SELECT job_id, sequence, status, event_type, payload FROM job_outbox_events
		WHERE job_id = ? ORDER BY sequence`), jobID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []eventRow
	for rows.Next() {
		var e eventRow
		if err := rows.Scan(&e.JobID, &e.Seq, &e.Status, &e.EventType, &e.Payload); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func statusOf(t testing.TB, s *inbox.Store, id string) string {
	t.Helper()
	v, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return v.Status
}

func count(t testing.TB, db *sqldb.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(db.Rebind(q), args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

var _ = fmt.Sprint
