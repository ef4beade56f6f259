package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestFencingUnderExpiringLeases: many workers claim rows under leases so
// short that they often expire mid-work and are reclaimed by another
// worker, while the old one keeps writing. Every fenced write appends its
// claim version to the row, so the row's record must never show an older
// claim writing after a newer one, and every row must end done exactly
// once, whatever the engine.
func TestFencingUnderExpiringLeases(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		const rows, workers, ttl = 60, 12, 100 * time.Millisecond
		q, _ := setup(t, db, rows)
		q.Now = nil // the real clock
		ctx := context.Background()
		var mu sync.Mutex
		done := map[string]int{}
		lost := 0
		stop := time.Now().Add(20 * time.Second)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 7))
				for time.Now().Before(stop) {
					cs, err := q.Claim(ctx, fmt.Sprint("w", w), 1, ttl)
					if err != nil {
						t.Error(err)
						return
					}
					if len(cs) == 0 {
						mu.Lock()
						n := len(done)
						mu.Unlock()
						if n == rows {
							return
						}
						time.Sleep(5 * time.Millisecond)
						continue
					}
					c := cs[0]
					err = work(ctx, q, db, &c, r, ttl)
					if errors.Is(err, lease.ErrStale) {
						mu.Lock()
						lost++
						mu.Unlock()
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					done[c.ID]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for id, n := range done {
			if n != 1 {
				t.Errorf("%s finished %d times", id, n)
			}
		}
		if len(done) != rows || lost == 0 {
			t.Errorf("%d of %d rows finished, %d attempts lost their lease", len(done), rows, lost)
		}
		res, err := db.Query(`SELECT id, status, note FROM work`)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Close()
		for res.Next() {
			var id, status string
			var note sql.NullString
			if err := res.Scan(&id, &status, &note); err != nil {
				t.Fatal(err)
			}
			last := int64(0)
			for _, f := range strings.Split(strings.Trim(note.String, ","), ",") {
				v, _ := strconv.ParseInt(f, 10, 64)
				if v < last {
					t.Errorf("%s: claim %d wrote after claim %d (%s)", id, v, last, note.String)
				}
				last = v
			}
			if status != "done" {
				t.Errorf("%s ended %s", id, status)
			}
		}
	})
}

// work is one attempt: a few fenced writes with pauses, one in eight of
// them longer than the lease, a heartbeat, then busy -> done.
func work(ctx context.Context, q *lease.Queue, db *sqldb.DB, c *lease.Claim, r *rand.Rand, ttl time.Duration) error {
	pause := func() {
		d := time.Duration(r.IntN(5)) * time.Millisecond
		if r.IntN(8) == 0 {
			d = ttl + 20*time.Millisecond
		}
		time.Sleep(d)
	}
	appendVersion := func(tx *sql.Tx) error {
		return q.Exec(ctx, tx, c, "note = COALESCE(note, '') || ?", strconv.FormatInt(c.Version, 10)+",")
	}
	if err := db.Tx(ctx, func(tx *sql.Tx) error {
		if err := appendVersion(tx); err != nil {
			return err
		}
		return q.Move(ctx, tx, c, "busy", q.Time(), "")
	}); err != nil {
		c.Status = "taken"
		return err
	}
	pause()
	if err := q.Heartbeat(ctx, c, ttl); err != nil {
		return err
	}
	pause()
	return db.Tx(ctx, func(tx *sql.Tx) error {
		if err := appendVersion(tx); err != nil {
			return err
		}
		return q.Move(ctx, tx, c, "done", q.Time(), "")
	})
}
