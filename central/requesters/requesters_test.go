package requesters_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
