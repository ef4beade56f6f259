package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// leaseRow is what the lease protocol keeps on an inbox_jobs row.
type leaseRow struct {
	status            string
	worker            *string
	leaseExp, beat    *int64
	version, attempts int64
}

func readLease(t *testing.T, db *sqldb.DB, id string) leaseRow {
	t.Helper()
	var r leaseRow
	err := db.QueryRow(db.Rebind(`SELECT status, worker_id, lease_expires_at, heartbeat_at, claim_version, attempt_count
		FROM inbox_jobs WHERE id = ?`), id).Scan(&r.status, &r.worker, &r.leaseExp, &r.beat, &r.version, &r.attempts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestClaimWritesTheLeaseColumns: a claim sets worker_id, status=claimed,
// lease_expires_at=now+ttl and heartbeat_at=now on the row, and adds one to
// claim_version and attempt_count; a heartbeat moves heartbeat_at and the
// lease; a job given back without a failure keeps its claim_version and
// returns the attempt, so the next claim is attempt 1 again under a new
// version.
func TestClaimWritesTheLeaseColumns(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy(), inbox.WithClock(clk.Now))
		id := enqueue(t, s, addRequester(t, db), 1)[0]
		const ttl = 45 * time.Second

		if r := readLease(t, db, id); r.status != "queued" || r.worker != nil || r.leaseExp != nil || r.beat != nil ||
			r.version != 0 || r.attempts != 0 {
			t.Fatalf("queued row %+v", r)
		}
		for round, want := range []struct{ version, attempts int64 }{{1, 1}, {2, 1}} {
			now := s.Now()
			js, err := s.Claim(ctx, "w-a", 1, ttl)
			if err != nil || len(js) != 1 {
				t.Fatalf("round %d: claim %v %d", round, err, len(js))
			}
			r := readLease(t, db, id)
			if r.status != "claimed" || r.worker == nil || *r.worker != "w-a" {
				t.Fatalf("round %d: claimed row %+v", round, r)
			}
			if r.leaseExp == nil || *r.leaseExp != sqldb.Micros(now.Add(ttl)) {
				t.Errorf("round %d: lease_expires_at %v, want now+ttl %d", round, r.leaseExp, sqldb.Micros(now.Add(ttl)))
			}
			if r.beat == nil || *r.beat != sqldb.Micros(now) {
				t.Errorf("round %d: heartbeat_at %v, want now %d", round, r.beat, sqldb.Micros(now))
			}
			if r.version != want.version || r.attempts != want.attempts || js[0].Version != r.version || js[0].Attempt != int(r.attempts) {
				t.Errorf("round %d: claim_version %d attempt_count %d (claim %d/%d), want %d/%d",
					round, r.version, r.attempts, js[0].Version, js[0].Attempt, want.version, want.attempts)
			}

			clk.Add(10 * time.Second)
			later := s.Now()
			if err := s.Heartbeat(ctx, js[0], ttl); err != nil {
				t.Fatal(err)
			}
			r = readLease(t, db, id)
			if r.beat == nil || *r.beat != sqldb.Micros(later) || r.leaseExp == nil || *r.leaseExp != sqldb.Micros(later.Add(ttl)) {
				t.Errorf("round %d: after heartbeat %+v, want heartbeat_at %d lease %d", round, r, sqldb.Micros(later), sqldb.Micros(later.Add(ttl)))
			}
			if r.version != want.version || r.attempts != want.attempts {
				t.Errorf("round %d: a heartbeat changed claim_version/attempt_count: %+v", round, r)
			}

			if round == 0 {
				// Given back without a failure: no attempt spent.
				if err := s.Release(ctx, js[0]); err != nil {
					t.Fatal(err)
				}
				if r := readLease(t, db, id); r.status != "queued" || r.attempts != 0 || r.version != 1 || r.worker != nil || r.leaseExp != nil {
					t.Fatalf("released row %+v", r)
				}
			}
		}
	})
}
