package credentials_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestRewrapColumns: job credentials and both webhook-secret slots sealed
// under an old KEK move to the active one through the shared rewrap loop
// (more rows than one batch), open with the new key alone afterwards, and
// a second pass finds nothing to do.
func TestRewrapColumns(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		k1, k2 := "k1:"+credentials.NewKey(), "k2:"+credentials.NewKey()
		old, err := credentials.ParseKeyring(k1, "")
		if err != nil {
			t.Fatal(err)
		}
		oldReq := requesters.New(db, old)
		created, err := oldReq.Create(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := oldReq.RotateSecret(ctx, created.RequesterID, time.Hour); err != nil {
			t.Fatal(err)
		}
		oldJobs := inbox.New(db, old, inbox.DefaultPolicy())
		const jobs = 203 // more than one batch
		ids := make([]string, jobs)
		want := credentials.Storage{Output: credentials.S3{AccessKeyID: "AK", SecretAccessKey: "SK"}}
		for i := range ids {
			ids[i] = inbox.NewJobID()
			err := oldJobs.Enqueue(ctx, inbox.NewJob{ID: ids[i], RequesterID: created.RequesterID,
				Source: inbox.Source{URL: "https://example.com/a.wav"}, Output: inbox.Output{Bucket: "b", Prefix: "p/"},
				Renditions: []inbox.Rendition{{Name: "hi", Codec: "opus"}}, Credentials: want})
			if err != nil {
				t.Fatal(err)
			}
		}

		both, err := credentials.ParseKeyring(k2+","+k1, "k2")
		if err != nil {
			t.Fatal(err)
		}
		for pass, wantJobs, wantSecrets := 1, jobs, 2; pass <= 2; pass, wantJobs, wantSecrets = pass+1, 0, 0 {
			n, err := inbox.New(db, both, inbox.DefaultPolicy()).Rewrap(ctx)
			if err != nil || n != wantJobs {
				t.Fatalf("pass %d: jobs rewrapped %d, want %d (%v)", pass, n, wantJobs, err)
			}
			n, err = requesters.New(db, both).Rewrap(ctx)
			if err != nil || n != wantSecrets {
				t.Fatalf("pass %d: secrets rewrapped %d, want %d (%v)", pass, n, wantSecrets, err)
			}
		}

		onlyK2, _ := credentials.ParseKeyring(k2, "")
		sec, err := requesters.New(db, onlyK2).WebhookSecrets(ctx, created.RequesterID)
		if err != nil || sec.Previous == nil || sec.Previous.Value != created.WebhookSecret || sec.Current.Value == "" {
			t.Fatalf("secrets after rewrap: %+v %v", sec.Previous, err)
		}
		newJobs := inbox.New(db, onlyK2, inbox.DefaultPolicy())
		for _, id := range []string{ids[0], ids[jobs-1]} {
			got, _, err := newJobs.Credentials(ctx, &inbox.Job{Claim: lease.Claim{ID: id}, RequesterID: created.RequesterID})
			if err != nil || got.Output.SecretAccessKey != "SK" {
				t.Fatalf("job %s after rewrap: %v", id, err)
			}
		}
	})
}

// TestRewrapSkipsBlobThatDoesNotOpen: of three job rows the middle one's
// wrapped DEK is corrupt. The walk goes past it: rows 1 and 3 move to the
// new KEK, the error names the middle row alone (its id, no key material),
// and the requesters' secrets rewrap afterwards as usual.
func TestRewrapSkipsBlobThatDoesNotOpen(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		key1, key2 := credentials.NewKey(), credentials.NewKey()
		old, err := credentials.ParseKeyring("k1:"+key1, "")
		if err != nil {
			t.Fatal(err)
		}
		created, err := requesters.New(db, old).Create(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		oldJobs := inbox.New(db, old, inbox.DefaultPolicy())
		want := credentials.Storage{Output: credentials.S3{AccessKeyID: "AK", SecretAccessKey: "SK"}}
		ids := []string{inbox.NewJobID(), inbox.NewJobID(), inbox.NewJobID()}
		slices.Sort(ids) // the walk's order
		for _, id := range ids {
			err := oldJobs.Enqueue(ctx, inbox.NewJob{ID: id, RequesterID: created.RequesterID,
				Source: inbox.Source{URL: "https://example.com/a.wav"}, Output: inbox.Output{Bucket: "b", Prefix: "p/"},
				Renditions: []inbox.Rendition{{Name: "hi", Codec: "opus"}}, Credentials: want})
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.ExecContext(ctx, db.Rebind(`UPDATE inbox_jobs SET storage_creds_dek_wrapped = ? WHERE id = ?`),
			[]byte("not a wrapped key, not at all"), ids[1]); err != nil {
			t.Fatal(err)
		}

		both, err := credentials.ParseKeyring("k2:"+key2+",k1:"+key1, "k2")
		if err != nil {
			t.Fatal(err)
		}
		n, err := inbox.New(db, both, inbox.DefaultPolicy()).Rewrap(ctx)
		var re *credentials.RewrapError
		if n != 2 || !errors.As(err, &re) || !errors.Is(err, credentials.ErrRewrapIncomplete) || !errors.Is(err, credentials.ErrDecrypt) {
			t.Fatalf("rewrapped %d, err %v", n, err)
		}
		if re.Table != "inbox_jobs" || re.Count != 1 || !slices.Equal(re.IDs, ids[1:2]) {
			t.Fatalf("failure %+v", re)
		}
		for _, s := range []string{key1, key2, "not a wrapped key"} {
			if msg := err.Error(); len(msg) > 512 || strings.Contains(msg, s) {
				t.Fatalf("error %q", msg)
			}
		}
		if !strings.Contains(err.Error(), ids[1]) {
			t.Fatalf("error %q does not name row %s", err, ids[1])
		}
		if n, err := requesters.New(db, both).Rewrap(ctx); n != 1 || err != nil {
			t.Fatalf("requester secrets rewrapped %d: %v", n, err)
		}

		onlyK2, _ := credentials.ParseKeyring("k2:"+key2, "")
		newJobs := inbox.New(db, onlyK2, inbox.DefaultPolicy())
		for _, id := range []string{ids[0], ids[2]} {
			got, _, err := newJobs.Credentials(ctx, &inbox.Job{Claim: lease.Claim{ID: id}, RequesterID: created.RequesterID})
			if err != nil || got.Output.SecretAccessKey != "SK" {
				t.Fatalf("job %s after rewrap: %v", id, err)
			}
		}
		var kek string
		if err := db.QueryRowContext(ctx, db.Rebind(`SELECT storage_creds_kek_id FROM inbox_jobs WHERE id = ?`), ids[1]).Scan(&kek); err != nil || kek != "k1" {
			t.Fatalf("corrupt row's kek_id %q: %v", kek, err)
		}
		if sec, err := requesters.New(db, onlyK2).WebhookSecrets(ctx, created.RequesterID); err != nil || sec.Current.Value != created.WebhookSecret {
			t.Fatalf("requester secret after rewrap: %v", err)
		}
	})
}

// TestRewrapPreviousSecretPastCurrentThatDoesNotOpen: a requester's current
// webhook secret that does not open does not keep its previous one under the
// old KEK: the previous slot still moves, and the error names the current
// slot's row alone.
func TestRewrapPreviousSecretPastCurrentThatDoesNotOpen(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		k1, k2 := "k1:"+credentials.NewKey(), "k2:"+credentials.NewKey()
		old, err := credentials.ParseKeyring(k1, "")
		if err != nil {
			t.Fatal(err)
		}
		created, err := requesters.New(db, old).Create(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := requesters.New(db, old).RotateSecret(ctx, created.RequesterID, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, db.Rebind(`UPDATE requesters SET webhook_secret_dek_wrapped = ? WHERE id = ?`),
			[]byte("not a wrapped key, not at all"), created.RequesterID); err != nil {
			t.Fatal(err)
		}
		both, err := credentials.ParseKeyring(k2+","+k1, "k2")
		if err != nil {
			t.Fatal(err)
		}
		n, err := requesters.New(db, both).Rewrap(ctx)
		var re *credentials.RewrapError
		if n != 1 || !errors.As(err, &re) || re.Prefix != "webhook_secret_" || !slices.Equal(re.IDs, []string{created.RequesterID}) {
			t.Fatalf("rewrapped %d, err %v", n, err)
		}
		var kek string
		if err := db.QueryRowContext(ctx, db.Rebind(`SELECT previous_webhook_secret_kek_id FROM requesters WHERE id = ?`),
			created.RequesterID).Scan(&kek); err != nil || kek != "k2" {
			t.Fatalf("previous secret's kek_id %q: %v", kek, err)
		}
	})
}
