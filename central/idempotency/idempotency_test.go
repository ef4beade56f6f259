package idempotency_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/idempotency"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

func TestReserveReplayConflictExpiry(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		now := time.Unix(1_800_000_000, 0)
		s := idempotency.New(db, time.Hour, func() time.Time { return now })
		reserve := func(scope, key, hash, job string) (*idempotency.Response, error) {
			var got *idempotency.Response
			err := db.Tx(ctx, func(tx *sql.Tx) error {
				var err error
				got, err = s.Reserve(ctx, tx, now, scope, key, hash, idempotency.Response{Status: 202, Body: []byte(`{"job_id":"` + job + `"}`), JobID: job})
				return err
			})
			return got, err
		}
		if got, err := reserve("r1", "k", "h1", "j1"); got != nil || err != nil {
			t.Fatalf("first: %v %v", got, err)
		}
		got, err := reserve("r1", "k", "h1", "j2")
		if err != nil || got == nil || got.JobID != "j1" || got.Status != 202 {
			t.Fatalf("replay: %+v %v", got, err)
		}
		if _, err := reserve("r1", "k", "h2", "j3"); !errors.Is(err, idempotency.ErrConflict) {
			t.Fatalf("conflict: %v", err)
		}
		if got, err := reserve("r2", "k", "h2", "j4"); got != nil || err != nil {
			t.Fatalf("other scope: %v %v", got, err)
		}
		now = now.Add(2 * time.Hour)
		if got, err := reserve("r1", "k", "h2", "j5"); got != nil || err != nil {
			t.Fatalf("expired key not taken over: %v %v", got, err)
		}
		now = now.Add(2 * time.Hour)
		if n, err := s.Purge(ctx); err != nil || n != 2 {
			t.Fatalf("purge: %d %v", n, err)
		}
	})
}
