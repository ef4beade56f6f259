package inbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// The queued event of a released job carries the attempt count the job
// row holds after the release, which gives the attempt back: a receiver
// must not be told an attempt was spent that the job's status does not
// count.
func TestReleaseEventCountsWhatTheRowHolds(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		id := enqueue(t, s, addRequester(t, db), 1)[0]
		js, err := s.Claim(ctx, "A", 1, time.Minute)
		if err != nil || len(js) != 1 {
			t.Fatalf("claim: %v %d", err, len(js))
		}
		if err := s.Release(ctx, js[0]); err != nil {
			t.Fatal(err)
		}
		row := count(t, db, `SELECT attempt_count FROM inbox_jobs WHERE id = ?`, id)
		evs := events(t, db, id)
		last := evs[len(evs)-1]
		var p struct {
			Status       string `json:"status"`
			AttemptCount int    `json:"attempt_count"`
		}
		if err := json.Unmarshal([]byte(last.Payload), &p); err != nil {
			t.Fatal(err)
		}
		if p.Status != "queued" || p.AttemptCount != row {
			t.Fatalf("release event %+v, job row attempt_count %d", p, row)
		}
	})
}
