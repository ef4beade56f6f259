package inbox_test

import (
	"testing"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestStoreOnTheRealClockFollowsTheDatabaseClock: a store without
// WithClock must leave its lease queue on the real clock (Queue.Now nil),
// the only case in which the queue measures its offset to the database
// clock again every lease.ClockResync; a non-nil Now is taken for a test
// clock and measured once, so a pod whose clock was stepped after its first
// write would judge leases and backoff by the stale offset for good.
func TestStoreOnTheRealClockFollowsTheDatabaseClock(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		if s.Queue().Now != nil {
			t.Fatal("the inbox's lease queue has a fixed process clock: its database clock offset is never measured again")
		}
		clk := newClock()
		if inbox.New(db, testKeys(t), inbox.DefaultPolicy(), inbox.WithClock(clk.Now)).Queue().Now == nil {
			t.Fatal("WithClock did not reach the lease queue")
		}
	})
}
