package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// HappyPath is the order of states a job that succeeds moves through.
var HappyPath = []string{
	schema.StatusQueued, schema.StatusClaimed, schema.StatusFetching,
	schema.StatusProcessing, schema.StatusUploading, schema.StatusSucceeded,
}

// SucceedMany moves every job in jobs (all in the same state) along the
// rest of HappyPath to succeeded in one transaction and one fenced
// statement, recording one outbox event per transition. It is for executors
// with nothing to do between states (no-op and test executors, benchmark
// drains). Jobs whose claim went stale are returned untouched.
func (s *Store) SucceedMany(ctx context.Context, jobs []*Job, outputs []OutputFile) (stale []*Job, err error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	from := jobs[0].claim().Status
	var path []string
	for i, st := range HappyPath {
		if st == from {
			path = HappyPath[i+1:]
		}
	}
	if len(path) == 0 {
		return nil, fmt.Errorf("inbox: no path to succeeded from %s", from)
	}
	// The guards of §3 hold here as on the single-job move path.
	for _, j := range jobs {
		c, prev := j.claim(), from
		for _, to := range path {
			if err := checkHeld(prev, to); err != nil {
				return nil, err
			}
			if err := CheckGuard(prev, to, c.Attempt, j.MaxAttempts); err != nil {
				return nil, err
			}
			prev = to
		}
	}
	out, err := json.Marshal(outputs)
	if err != nil {
		return nil, fmt.Errorf("inbox: outputs: %w", err)
	}
	outEnc := encodeRaw(out) // one encoding for every job's succeeded event
	var cs []*lease.Claim
	now := s.now() // before the transaction holds a connection (see Store.write)
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		cs = make([]*lease.Claim, len(jobs))
		for i, j := range jobs {
			c := j.claim()
			cs[i] = &c
		}
		st, err := s.q.MoveMany(ctx, tx, cs, path, now,
			"outputs = ?, started_at = COALESCE(started_at, ?), finished_at = ?, lease_expires_at = NULL",
			string(out), sqldb.Micros(now), sqldb.Micros(now))
		if err != nil {
			return err
		}
		staleSet := make(map[*lease.Claim]bool, len(st))
		for _, c := range st {
			staleSet[c] = true
		}
		evs := make([]Event, 0, len(jobs)*len(path))
		stale = stale[:0]
		for i, j := range jobs {
			if staleSet[cs[i]] {
				stale = append(stale, j)
				continue
			}
			prev := from
			first := cs[i].Seq - int64(len(path)) + 1
			for k, to := range path {
				ev := transition(j, prev, to, first+int64(k), now)
				if to == schema.StatusSucceeded {
					ev.Outputs, ev.outputsEnc = out, outEnc
				}
				evs = append(evs, ev)
				prev = to
			}
		}
		return insertEvents(ctx, s.db, tx, evs)
	})
	if err != nil {
		return nil, err
	}
	// Only a committed move changes the jobs' claims (see Store.write).
	staleSet := make(map[*Job]bool, len(stale))
	for _, j := range stale {
		staleSet[j] = true
	}
	for i, j := range jobs {
		if !staleSet[j] {
			j.commitClaim(*cs[i])
		}
	}
	s.notify()
	return stale, nil
}
