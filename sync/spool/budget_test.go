package spool_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// A budget lowered below a large spool (a smaller
// EUTERPE_SYNC_SPOOL_MAX_MB at restart) is worked off over several moves,
// each dropping at most DropBatch more than it spooled, so no one
// transaction holds the spool for the whole drop. The drops still go
// oldest first, leave lifecycle events, and add up to one gap per job
// whose count is every delta of that job dropped.
func TestLoweredBudgetIsWorkedOffOverMoves(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	sp, err := spool.Open(ctx, path, 1<<30)
	require.NoError(t, err)
	data := `{"text":"` + strings.Repeat("x", 100) + `"}`
	total := 3*spool.DropBatch + 500
	var in []jobs.Captured
	for _, job := range []string{"a", "b"} {
		in = append(in, ev(job, len(in), "queued", "{}"), ev(job, len(in)+1, "running", "{}"))
	}
	for i := range total {
		in = append(in, ev([]string{"a", "b"}[i%2], len(in), "delta", data))
	}
	for i := 0; i < len(in); i += 1000 {
		_, err := sp.Add(ctx, in[i:min(i+1000, len(in))])
		require.NoError(t, err)
	}
	require.NoError(t, sp.Moved(ctx, nil, true))
	require.NoError(t, sp.Close())

	const budget = 20_000
	sp = open(t, path, budget)
	dropped, moves := 0, 0
	for n := len(in); ; n++ {
		move := []jobs.Captured{ev("c", n, "delta", "{}")}
		res, err := sp.Add(ctx, move)
		require.NoError(t, err)
		require.NoError(t, sp.Moved(ctx, move, true))
		require.LessOrEqual(t, res.Dropped, spool.DropBatch+len(move), "move %d", moves)
		assert.Zero(t, res.Over, "deltas are left to drop")
		dropped += res.Dropped
		moves++
		st, err := sp.Stats(ctx)
		require.NoError(t, err)
		if st.Bytes <= budget {
			break
		}
		require.Less(t, moves, 10, "the spool never got within its budget")
	}
	assert.GreaterOrEqual(t, moves, 3)
	assert.Equal(t, int64(dropped), sp.Dropped())

	p, err := sp.Next(ctx, 1000, 100, 1<<30)
	require.NoError(t, err)
	kept := map[string]int{}
	var firstDelta string
	for _, r := range p.Rows {
		kept[r.Type]++
		if r.Type == "delta" && firstDelta == "" {
			firstDelta = r.Entry
		}
	}
	assert.Equal(t, 2, kept["queued"])
	assert.Equal(t, 2, kept["running"])
	gapped := map[string]int64{}
	oldest := map[string]string{"a": in[4].Entry, "b": in[5].Entry}
	for _, g := range p.Gaps {
		gapped[g.JobID] += g.Count
		assert.Equal(t, "delta", g.Type)
		assert.Equal(t, oldest[g.JobID], g.FirstEntry, "job %s's gap starts at its oldest delta", g.JobID)
		assert.Less(t, g.LastEntry, firstDelta, "job %s's gap ends before the deltas kept", g.JobID)
	}
	assert.Len(t, p.Gaps, 2, "one gap per job across the moves")
	assert.Equal(t, int64(dropped), gapped["a"]+gapped["b"])
	assert.Equal(t, total+moves, kept["delta"]+dropped, "every delta is kept or dropped")
}

// Stats answers at once while another call holds the spool (a long move
// or send), instead of waiting for it: /metrics and the heartbeat read it.
func TestStatsAnswersWhileTheSpoolIsBusy(t *testing.T) {
	ctx := context.Background()
	sp := open(t, filepath.Join(t.TempDir(), spool.File), 1<<20)
	_, err := sp.Add(ctx, []jobs.Captured{ev("a", 1, "queued", "{}"), ev("a", 2, "delta", "{}")})
	require.NoError(t, err)
	release := spool.Hold(sp)
	t.Cleanup(release)
	got := make(chan spool.Stats, 1)
	go func() {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, _ := sp.Stats(c)
		got <- st
	}()
	select {
	case st := <-got:
		assert.Equal(t, int64(2), st.Events)
		assert.Equal(t, int64(1700000000001), st.OldestTS)
	case <-time.After(3 * time.Second):
		t.Fatal("Stats waited for the spool")
	}
}

// Stats of a closed spool fails, as it did when it read the file: the
// shipper's callers tell a spool they closed by it.
func TestStatsOfAClosedSpoolFails(t *testing.T) {
	sp, err := spool.Open(context.Background(), filepath.Join(t.TempDir(), spool.File), 1<<20)
	require.NoError(t, err)
	require.NoError(t, sp.Close())
	_, err = sp.Stats(context.Background())
	require.ErrorIs(t, err, spool.ErrClosed)
}
