package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// The worker's heartbeats run beside the job's final write (a failure in
// the job's goroutine, a success in the finisher's), which copies and
// moves the job's claim: a heartbeat must not write the same claim
// unsynchronised (the race detector's finding, with stages that end about
// when the first heartbeat is sent).
func TestWorkerHeartbeatBesideFinalWrite(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db, nil)
		f.register(t, "slow", StageFunc{StageName: "storage", Fn: func(ctx context.Context, m JobMessage, in any) (any, error) {
			time.Sleep(time.Duration(95+rand.IntN(10)) * time.Millisecond)
			if rand.IntN(2) == 0 {
				return nil, Fail(CodeQualityFailed, "x")
			}
			return "ref", nil
		}})
		var ids []string
		for i := 0; i < 40; i++ {
			ids = append(ids, f.submit(t, "slow", fmt.Sprint("S", i), "2026-01-02").JobID)
		}
		f.runUntil(t, 300*time.Millisecond, "all done", func() bool {
			for _, id := range ids {
				if s := f.get(t, id).Status; s != StatusSucceeded && s != StatusFailed {
					return false
				}
			}
			return true
		})
	})
}
