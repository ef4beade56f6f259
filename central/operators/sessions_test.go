package operators_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

func TestSessions(t *testing.T) {
	sqltest.Each(t, sets(), func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		ops := operators.New(db)
		alice, err := ops.Create(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		keys, _ := credentials.ParseKeyring("k:"+credentials.NewKey(), "")
		req, err := requesters.New(db, keys).Create(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		ss := operators.NewSessions(db, time.Hour).WithClock(func() time.Time { return now })

		for name, token := range map[string]string{"requester api key": req.APIKey, "empty": "", "garbage": "eop_nope"} {
			if _, err := ss.Start(ctx, ops, token); !errors.Is(err, operators.ErrUnknownToken) {
				t.Errorf("%s opened a session: %v", name, err)
			}
		}
		s, err := ss.Start(ctx, ops, alice.Token)
		if err != nil {
			t.Fatal(err)
		}
		if s.ID == "" || s.Operator.ID != alice.OperatorID || !s.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Fatalf("session %+v", s)
		}
		var stored string
		if err := db.QueryRow(`SELECT id_hash FROM operator_sessions`).Scan(&stored); err != nil || stored == s.ID {
			t.Fatalf("session id stored in plaintext (%v)", err)
		}
		if op, err := ss.Lookup(ctx, s.ID); err != nil || op.Name != "alice" {
			t.Fatalf("lookup: %+v %v", op, err)
		}
		for _, bad := range []string{"", s.ID + "x", "nope"} {
			if _, err := ss.Lookup(ctx, bad); !errors.Is(err, operators.ErrNoSession) {
				t.Errorf("lookup %q: %v", bad, err)
			}
		}

		// CSRF tokens are bound to their session.
		other, err := ss.Start(ctx, ops, alice.Token)
		if err != nil {
			t.Fatal(err)
		}
		tok := operators.CSRFToken(s.ID)
		cases := []struct {
			name, id, got string
			ok            bool
		}{
			{"own token", s.ID, tok, true},
			{"other session's token", other.ID, tok, false},
			{"empty token", s.ID, "", false},
			{"no session", "", tok, false},
			{"session id as token", s.ID, s.ID, false},
		}
		for _, c := range cases {
			if operators.CheckCSRF(c.id, c.got) != c.ok {
				t.Errorf("%s: want %v", c.name, c.ok)
			}
		}

		// Expiry, sign-out and disabling the operator each end a session.
		now = now.Add(time.Hour)
		if _, err := ss.Lookup(ctx, s.ID); !errors.Is(err, operators.ErrNoSession) {
			t.Fatalf("expired session: %v", err)
		}
		now = now.Add(-time.Minute)
		if err := ss.End(ctx, other.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := ss.Lookup(ctx, other.ID); !errors.Is(err, operators.ErrNoSession) {
			t.Fatalf("ended session: %v", err)
		}
		third, err := ss.Start(ctx, ops, alice.Token)
		if err != nil {
			t.Fatal(err)
		}
		if err := ops.Disable(ctx, alice.OperatorID); err != nil {
			t.Fatal(err)
		}
		if _, err := ss.Lookup(ctx, third.ID); !errors.Is(err, operators.ErrNoSession) {
			t.Fatalf("disabled operator's session: %v", err)
		}
		// A new sign-in sweeps expired rows.
		bob, _ := ops.Create(ctx, "bob")
		now = now.Add(2 * time.Hour)
		if _, err := ss.Start(ctx, ops, bob.Token); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM operator_sessions`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("sessions after sweep: %d %v", n, err)
		}
	})
}
