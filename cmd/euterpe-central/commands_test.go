package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// cli runs the program in-process with env as its whole environment.
type cli struct {
	t   *testing.T
	env map[string]string
}

func newCLI(t *testing.T, e sqldb.Engine) *cli {
	return &cli{t: t, env: map[string]string{
		"EUTERPE_DATABASE_URL": sqltest.URL(t, e),
		"EUTERPE_KEYRING":      "k1:" + credentials.NewKey(),
		"EUTERPE_STATE_DIR":    t.TempDir(),
	}}
}

func (c *cli) run(args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, func(k string) string { return c.env[k] }, &out, &errb)
	return code, out.String(), errb.String()
}

// open opens the command's database with its keyring.
func (c *cli) open() (*sqldb.DB, *credentials.Keyring) {
	c.t.Helper()
	db, err := sqldb.Open(context.Background(), c.env["EUTERPE_DATABASE_URL"], "")
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = db.Close() })
	keys, err := credentials.ParseKeyring(c.env["EUTERPE_KEYRING"], "")
	if err != nil {
		c.t.Fatal(err)
	}
	return db, keys
}

func lines(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestMigrateCommand: `migrate` applies every migration set (exit 0, the
// version table lists them), and a second run is a no-op (exit 0, nothing
// applied, the same versions).
func TestMigrateCommand(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			c := newCLI(t, e)
			code, out, errOut := c.run("migrate")
			if code != 0 {
				t.Fatalf("migrate: exit %d\n%s", code, errOut)
			}
			if out != "" {
				t.Fatalf("migrate printed on stdout: %q", out)
			}
			if !strings.Contains(errOut, `"msg":"database migrated"`) || !strings.Contains(errOut, `"msg":"database is up to date"`) {
				t.Fatalf("migrate log:\n%s", errOut)
			}
			db, _ := c.open()
			versions := count(t, db, `SELECT COUNT(*) FROM euterpe_schema_versions`)
			if versions < 2 { // core and outbox sets at least
				t.Fatalf("%d schema versions recorded", versions)
			}
			for _, table := range []string{"inbox_jobs", "job_outbox_events", "requesters", "idempotency_keys"} {
				count(t, db, `SELECT COUNT(*) FROM `+table) // fails the test if the table is missing
			}

			code, _, errOut = c.run("migrate")
			if code != 0 {
				t.Fatalf("second migrate: exit %d\n%s", code, errOut)
			}
			if strings.Contains(errOut, `"msg":"database migrated"`) {
				t.Fatalf("second migrate applied something:\n%s", errOut)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM euterpe_schema_versions`); n != versions {
				t.Fatalf("second migrate: %d schema versions, had %d", n, versions)
			}
		})
	}
}

// TestRotateSecretCommand: `requester rotate-secret --id ID --overlap 1h`
// prints the new secret once (stdout only, never the log); afterwards the
// requester signs with two secrets, the previous one until the overlap
// ends. An unknown id exits non-zero with one line and prints nothing.
func TestRotateSecretCommand(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			c := newCLI(t, e)
			code, out, errOut := c.run("requester", "create", "--name", "acme")
			if code != 0 {
				t.Fatalf("create: exit %d\n%s", code, errOut)
			}
			var created struct {
				RequesterID   string `json:"requester_id"`
				WebhookSecret string `json:"webhook_secret"`
			}
			if err := json.Unmarshal([]byte(out), &created); err != nil || created.RequesterID == "" {
				t.Fatalf("create output %q: %v", out, err)
			}

			before := time.Now()
			code, out, errOut = c.run("requester", "rotate-secret", "--id", created.RequesterID, "--overlap", "1h")
			if code != 0 {
				t.Fatalf("rotate-secret: exit %d\n%s", code, errOut)
			}
			var rot struct {
				RequesterID string `json:"requester_id"`
				Secret      string `json:"webhook_secret"`
				Version     int    `json:"webhook_secret_version"`
				ValidUntil  string `json:"previous_secret_valid_until"`
			}
			if len(lines(out)) != 1 {
				t.Fatalf("rotate-secret printed %d lines: %q", len(lines(out)), out)
			}
			if err := json.Unmarshal([]byte(out), &rot); err != nil {
				t.Fatalf("rotate-secret output %q: %v", out, err)
			}
			if rot.RequesterID != created.RequesterID || !strings.HasPrefix(rot.Secret, "whsec_") ||
				rot.Secret == created.WebhookSecret || rot.Version != 2 {
				t.Fatalf("rotation %+v (old secret %s…)", rot, created.WebhookSecret[:8])
			}
			if n := strings.Count(out, rot.Secret); n != 1 {
				t.Fatalf("new secret printed %d times", n)
			}
			if strings.Contains(errOut, rot.Secret) || strings.Contains(errOut, created.WebhookSecret) {
				t.Fatalf("a secret reached the log:\n%s", errOut)
			}
			until, err := time.Parse(time.RFC3339, rot.ValidUntil)
			if err != nil || until.Before(before.Add(time.Hour-time.Second)) || until.After(time.Now().Add(time.Hour+time.Second)) {
				t.Fatalf("previous_secret_valid_until %q: %v", rot.ValidUntil, err)
			}

			db, keys := c.open()
			sec, err := requesters.New(db, keys).SecretsAt(context.Background(), created.RequesterID, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if sec.Current.Value != rot.Secret || sec.Previous == nil || sec.Previous.Value != created.WebhookSecret {
				t.Fatalf("secrets after rotation: current new=%v, previous old=%v", sec.Current.Value == rot.Secret,
					sec.Previous != nil && sec.Previous.Value == created.WebhookSecret)
			}
			if got := len(sec.Keys()); got != 2 {
				t.Fatalf("%d signing secrets during the overlap, want 2", got)
			}
			if d := sec.Previous.ExpiresAt.Sub(until); d < -time.Second || d > time.Second {
				t.Fatalf("previous secret expires %s, printed %s", sec.Previous.ExpiresAt, until)
			}

			code, out, errOut = c.run("requester", "rotate-secret", "--id", "req_unknown", "--overlap", "1h")
			if code == 0 || out != "" || len(lines(errOut)) != 1 {
				t.Fatalf("unknown id: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
			}
			if !strings.Contains(errOut, `no requester \"req_unknown\"`) {
				t.Fatalf("unknown id: stderr does not name it: %s", errOut)
			}
			code, _, errOut = c.run("requester", "rotate-secret", "--overlap", "1h")
			if code != 2 || len(lines(errOut)) != 1 || !strings.Contains(errOut, "-id") {
				t.Fatalf("no id: exit %d, stderr:\n%s", code, errOut)
			}
		})
	}
}

// manyIDs is n comma-separated fresh event ids, each after a comma.
func manyIDs(n int) string {
	var b strings.Builder
	for range n {
		b.WriteString("," + uuid.NewString())
	}
	return b.String()
}

// TestOutboxRedriveCommand: `outbox redrive` puts dead-lettered events
// back to pending, selected by --event-id, --job-id or --since (an event
// dead-lettered before the --since window stays); without a selector, or
// with a bad --since, it exits 2 and changes nothing.
func TestOutboxRedriveCommand(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			c := newCLI(t, e)
			if code, _, errOut := c.run("migrate"); code != 0 {
				t.Fatalf("migrate: exit %d\n%s", code, errOut)
			}
			db, _ := c.open()
			now := time.Now()
			dead := func(job string, deadAt time.Time) string {
				id := uuid.NewString()
				_, err := db.ExecContext(context.Background(), db.Rebind(`INSERT INTO job_outbox_events
					(event_id, job_id, requester_id, sequence, event_type, status, webhook_url, payload, attempt_count,
					 last_error, last_status_code, next_attempt_at, dead_lettered_at, created_at)
					VALUES (?, ?, 'req_1', 1, 'job.status', 'dead_letter', 'https://hooks.example.com/h', '{}', 7,
					 'retries exhausted: HTTP 500', 500, ?, ?, ?)`),
					id, job, sqldb.Micros(deadAt), sqldb.Micros(deadAt), sqldb.Micros(deadAt.Add(-time.Minute)))
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			byEvent := dead(uuid.NewString(), now.Add(-5*time.Hour))
			byJobID := uuid.NewString()
			byJob := dead(byJobID, now.Add(-5*time.Hour))
			recent := dead(uuid.NewString(), now.Add(-10*time.Minute))
			old := dead(uuid.NewString(), now.Add(-3*time.Hour))
			status := func(id string) (st string, attempts int) {
				t.Helper()
				if err := db.QueryRow(db.Rebind(`SELECT status, attempt_count FROM job_outbox_events WHERE event_id = ?`), id).Scan(&st, &attempts); err != nil {
					t.Fatal(err)
				}
				return st, attempts
			}

			for _, tc := range []struct {
				name string
				args []string
				code int
			}{
				{"no selector", nil, 2},
				{"bad since", []string{"--since", "yesterday"}, 2},
				{"negative since", []string{"--since", "-2h"}, 2},
				{"too many event ids", []string{"--event-id", byEvent + manyIDs(outbox.MaxRedriveEventIDs)}, 2},
				// Text no query can take is refused before the database is
				// opened, the same on both engines: never a driver error.
				{"job id not UTF-8", []string{"--job-id", "job-\xff\xfe"}, 2},
				{"job id with NUL", []string{"--job-id", byJobID + "\x00"}, 2},
				{"event id not UTF-8", []string{"--event-id", byEvent + ",\xc3\x28"}, 2},
				{"event id with NUL", []string{"--event-id", "\x00" + byEvent}, 2},
			} {
				code, out, errOut := c.run(append([]string{"outbox", "redrive"}, tc.args...)...)
				if code != tc.code || out != "" || len(lines(errOut)) != 1 {
					t.Fatalf("%s: exit %d (want %d), stdout %q, stderr:\n%s", tc.name, code, tc.code, out, errOut)
				}
				if !utf8.ValidString(errOut) || strings.ContainsRune(errOut, 0) || !strings.Contains(errOut, "invalid setting -") {
					t.Fatalf("%s: stderr is not one readable setting error:\n%q", tc.name, errOut)
				}
			}
			for _, id := range []string{byEvent, byJob, recent, old} {
				if st, _ := status(id); st != "dead_letter" {
					t.Fatalf("a refused redrive changed %s to %s", id, st)
				}
			}
			// Refused before any connection: a database that cannot be
			// reached changes nothing about the answer.
			unreachable := &cli{t: t, env: map[string]string{"EUTERPE_DATABASE_URL": "postgres://euterpe@127.0.0.1:1/none?connect_timeout=1",
				"EUTERPE_KEYRING": c.env["EUTERPE_KEYRING"], "EUTERPE_STATE_DIR": t.TempDir()}}
			if code, out, errOut := unreachable.run("outbox", "redrive", "--job-id", "\xff"); code != 2 || out != "" || len(lines(errOut)) != 1 {
				t.Fatalf("refused --job-id with no database: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
			}

			for _, tc := range []struct {
				name  string
				args  []string
				moved string
			}{
				{"--event-id", []string{"--event-id", byEvent}, byEvent},
				{"--job-id", []string{"--job-id", byJobID}, byJob},
				{"--since", []string{"--since", "2h"}, recent},
			} {
				code, out, errOut := c.run(append([]string{"outbox", "redrive"}, tc.args...)...)
				if code != 0 || strings.TrimSpace(out) != `{"redriven":1}` {
					t.Fatalf("%s: exit %d, stdout %q, stderr:\n%s", tc.name, code, out, errOut)
				}
				if st, attempts := status(tc.moved); st != "pending" || attempts != 0 {
					t.Fatalf("%s: event is %s with %d attempts, want pending with a fresh count", tc.name, st, attempts)
				}
			}
			if st, _ := status(old); st != "dead_letter" {
				t.Fatalf("an event dead-lettered before --since was redriven (%s)", st)
			}
			since := now.Add(-4 * time.Hour).UTC().Format(time.RFC3339)
			code, out, errOut := c.run("outbox", "redrive", "--since", since, "--event-id", old+","+byEvent)
			if code != 0 || strings.TrimSpace(out) != fmt.Sprintf(`{"redriven":%d}`, 1) {
				t.Fatalf("--since RFC 3339 with --event-id: exit %d, stdout %q, stderr:\n%s", code, out, errOut)
			}
			if st, _ := status(old); st != "pending" {
				t.Fatalf("--since %s --event-id: event is %s", since, st)
			}
		})
	}
}
