package requesters_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

func TestCreateAuthenticateSecrets(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		keys, _ := credentials.ParseKeyring("k:"+credentials.NewKey(), "")
		s := requesters.New(db, keys)
		c, err := s.Create(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		var hash string
		var enc []byte
		_ = db.QueryRow(db.Rebind(`SELECT api_key_hash, webhook_secret_encrypted FROM requesters WHERE id = ?`), c.RequesterID).Scan(&hash, &enc)
		if hash != requesters.HashKey(c.APIKey) || strings.Contains(hash, c.APIKey) || strings.Contains(string(enc), c.WebhookSecret) {
			t.Fatal("API key or webhook secret stored in plaintext")
		}
		r, err := s.Authenticate(ctx, c.APIKey)
		if err != nil || r.ID != c.RequesterID || r.Name != "acme" {
			t.Fatalf("authenticate: %+v %v", r, err)
		}
		for _, bad := range []string{"", "eut_x", c.APIKey + "x"} {
			if _, err := s.Authenticate(ctx, bad); !errors.Is(err, requesters.ErrUnknownKey) {
				t.Errorf("%q: %v", bad, err)
			}
		}
		keysOut, err := s.SigningKeys(ctx, c.RequesterID)
		if err != nil || len(keysOut) != 1 || string(keysOut[0]) != c.WebhookSecret {
			t.Fatalf("signing keys: %v", err)
		}
		if _, err := db.Exec(db.Rebind(`UPDATE requesters SET disabled_at = 1 WHERE id = ?`), c.RequesterID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(ctx, c.APIKey); !errors.Is(err, requesters.ErrUnknownKey) {
			t.Fatalf("disabled requester authenticated: %v", err)
		}
		if _, err := s.Create(ctx, "  "); err == nil {
			t.Fatal("blank name accepted")
		}
	})
}

func TestRotateSecretAndOverlap(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		keys, _ := credentials.ParseKeyring("k:"+credentials.NewKey(), "")
		s := requesters.New(db, keys)
		c, err := s.Create(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		rot, err := s.RotateSecret(ctx, c.RequesterID, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if rot.Version != 2 || rot.PreviousVersion != 1 || rot.Secret == c.WebhookSecret || !strings.HasPrefix(rot.Secret, "whsec_") {
			t.Fatalf("rotation: version %d/%d", rot.Version, rot.PreviousVersion)
		}
		var enc []byte
		_ = db.QueryRow(db.Rebind(`SELECT webhook_secret_encrypted FROM requesters WHERE id = ?`), c.RequesterID).Scan(&enc)
		if strings.Contains(string(enc), rot.Secret) {
			t.Fatal("rotated secret stored in plaintext")
		}
		now := time.Now()
		sec, err := s.SecretsAt(ctx, c.RequesterID, now)
		if err != nil || sec.Current.Value != rot.Secret || sec.Current.Version != 2 || sec.Previous == nil ||
			sec.Previous.Value != c.WebhookSecret || sec.Previous.Version != 1 || sec.Disabled {
			t.Fatalf("during overlap: %v", err)
		}
		if d := sec.Previous.ExpiresAt.Sub(rot.OverlapUntil); d < -time.Millisecond || d > time.Millisecond {
			t.Fatalf("overlap expiry %v, want %v", sec.Previous.ExpiresAt, rot.OverlapUntil)
		}
		if k, err := s.SigningKeys(ctx, c.RequesterID); err != nil || len(k) != 2 || string(k[0]) != rot.Secret || string(k[1]) != c.WebhookSecret {
			t.Fatalf("signing keys during overlap: %d, %v", len(k), err)
		}
		after, err := s.SecretsAt(ctx, c.RequesterID, rot.OverlapUntil.Add(time.Second))
		if err != nil || after.Previous != nil || len(after.Keys()) != 1 {
			t.Fatalf("after overlap: %+v, %v", after.Previous, err)
		}
		// A rotation during the overlap drops the oldest secret.
		rot3, err := s.RotateSecret(ctx, c.RequesterID, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		sec, err = s.SecretsAt(ctx, c.RequesterID, time.Now())
		if err != nil || sec.Current.Value != rot3.Secret || sec.Previous == nil || sec.Previous.Value != rot.Secret {
			t.Fatalf("second rotation: %v", err)
		}
		if _, err := s.RotateSecret(ctx, c.RequesterID, -time.Second); err == nil {
			t.Fatal("negative overlap accepted")
		}
		for _, id := range []string{"nobody"} {
			if _, err := s.RotateSecret(ctx, id, time.Hour); !errors.Is(err, requesters.ErrNotFound) {
				t.Fatalf("rotate unknown: %v", err)
			}
			if _, err := s.SecretsAt(ctx, id, now); !errors.Is(err, requesters.ErrNotFound) {
				t.Fatalf("secrets of unknown: %v", err)
			}
		}
		if _, err := db.Exec(db.Rebind(`UPDATE requesters SET disabled_at = 1 WHERE id = ?`), c.RequesterID); err != nil {
			t.Fatal(err)
		}
		if sec, err := s.SecretsAt(ctx, c.RequesterID, time.Now()); err != nil || !sec.Disabled {
			t.Fatalf("disabled requester: %+v %v", sec.Disabled, err)
		}
	})
}
