package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

// `keys rewrap` with one job blob that does not open (the middle of three)
// still moves the other two jobs, the requester's webhook secret and the
// edge's sync secret, prints the row it left behind (its id only) and exits
// non-zero, so the old KEK is not dropped while it still holds something.
func TestKeysRewrapGoesPastBlobThatDoesNotOpen(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			ctx := context.Background()
			c := newCLI(t, e)
			k1 := c.env["EUTERPE_KEYRING"]
			code, out, errOut := c.run("requester", "create", "--name", "acme")
			var req struct {
				ID     string `json:"requester_id"`
				Secret string `json:"webhook_secret"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &req) != nil {
				t.Fatalf("requester create: exit %d %q\n%s", code, out, errOut)
			}
			code, out, errOut = c.run("edge", "register", "--name", "edge-1")
			var edge ingest.Registered
			if code != 0 || json.Unmarshal([]byte(out), &edge) != nil {
				t.Fatalf("edge register: exit %d %q\n%s", code, out, errOut)
			}
			db, oldKeys := c.open()
			jobs := inbox.New(db, oldKeys, inbox.DefaultPolicy())
			ids := []string{inbox.NewJobID(), inbox.NewJobID(), inbox.NewJobID()}
			slices.Sort(ids)
			for _, id := range ids {
				err := jobs.Enqueue(ctx, inbox.NewJob{ID: id, RequesterID: req.ID,
					Source: inbox.Source{URL: "https://example.com/a.wav"}, Output: inbox.Output{Bucket: "b", Prefix: "p/"},
					Renditions:  []inbox.Rendition{{Name: "hi", Codec: "opus"}},
					Credentials: credentials.Storage{Output: credentials.S3{AccessKeyID: "AK", SecretAccessKey: "SK"}}})
				if err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.ExecContext(ctx, db.Rebind(`UPDATE inbox_jobs SET storage_creds_dek_wrapped = ? WHERE id = ?`),
				[]byte("not a wrapped key, not at all"), ids[1]); err != nil {
				t.Fatal(err)
			}

			k2 := "k2:" + credentials.NewKey()
			c.env["EUTERPE_KEYRING"] = k2 + "," + k1
			code, out, errOut = c.run("keys", "rewrap")
			var got struct {
				Jobs           int `json:"jobs"`
				WebhookSecrets int `json:"webhook_secrets"`
				EdgeSecrets    int `json:"edge_secrets"`
				Failed         []struct {
					Table string   `json:"table"`
					Count int      `json:"count"`
					IDs   []string `json:"ids"`
				} `json:"failed"`
			}
			if code != 1 || json.Unmarshal([]byte(out), &got) != nil {
				t.Fatalf("rewrap: exit %d %q\n%s", code, out, errOut)
			}
			if got.Jobs != 2 || got.WebhookSecrets != 1 || got.EdgeSecrets != 1 || len(got.Failed) != 1 ||
				got.Failed[0].Table != "inbox_jobs" || got.Failed[0].Count != 1 || !slices.Equal(got.Failed[0].IDs, ids[1:2]) {
				t.Fatalf("rewrap output %s", out)
			}
			if !strings.Contains(errOut, ids[1]) || !strings.Contains(errOut, `"alert":true`) {
				t.Fatalf("the row left behind is not logged:\n%s", errOut)
			}
			for _, secret := range []string{k1[3:], k2[3:], req.Secret, edge.SyncSecret, "not a wrapped key"} {
				if strings.Contains(out+errOut, strings.TrimRight(secret, "=")) {
					t.Fatal("key material or a secret printed")
				}
			}

			onlyK2, _ := credentials.ParseKeyring(k2, "")
			newJobs := inbox.New(db, onlyK2, inbox.DefaultPolicy())
			for _, id := range []string{ids[0], ids[2]} {
				got, _, err := newJobs.Credentials(ctx, &inbox.Job{Claim: lease.Claim{ID: id}, RequesterID: req.ID})
				if err != nil || got.Output.SecretAccessKey != "SK" {
					t.Fatalf("job %s after rewrap: %v", id, err)
				}
			}
			if sec, err := requesters.New(db, onlyK2).WebhookSecrets(ctx, req.ID); err != nil || sec.Current.Value != req.Secret {
				t.Fatalf("webhook secret after rewrap: %v", err)
			}
			if creds, err := ingest.NewRegistry(db, onlyK2).CredentialsAt(ctx, edge.EdgeID, time.Now()); err != nil || len(creds.Secrets) != 1 {
				t.Fatalf("edge secret after rewrap: %v", err)
			}
		})
	}
}
