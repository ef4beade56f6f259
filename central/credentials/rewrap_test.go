package credentials_test

import (
	"context"
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
