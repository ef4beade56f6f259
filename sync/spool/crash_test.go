package spool_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// deltas are job's delta events first..last, all of one size.
func deltas(job string, first, last int) []jobs.Captured {
	var out []jobs.Captured
	for n := first; n <= last; n++ {
		out = append(out, ev(job, n, "delta", `{"text":"tok"}`))
	}
	return out
}

// rowsBudget is a budget with room for n rows like c, and not n+1.
func rowsBudget(n int, c jobs.Captured) int64 {
	size := spool.SizeOf(c)
	return int64(n)*size + size/2
}

func gapCount(gs []spool.Gap) (n int64) {
	for _, g := range gs {
		n += g.Count
	}
	return n
}

// A batch handed out by Next stays protected from the budget across a
// restart: central may have stored it just before the edge was killed, and
// a gap for events central has would count them twice.
func TestSpoolInFlightBatchSurvivesRestart(t *testing.T) {
	d := deltas("a", 1, 8)
	for _, tc := range []struct {
		name        string
		budgetRows  int
		wantDropped int
		wantKept    []jobs.Captured
	}{
		{"drops the oldest rows past the batch", 6, 2, append(d[:5:5], d[7])},
		{"drops nothing within the budget", 8, 0, d},
		{"drops every row past the batch", 5, 3, d[:5]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), spool.File)
			budget := rowsBudget(tc.budgetRows, d[0])
			sp, err := spool.Open(ctx, path, budget)
			require.NoError(t, err)
			res, err := sp.Add(ctx, d[:5])
			require.NoError(t, err)
			require.Equal(t, spool.AddResult{Added: 5}, res)
			p, err := sp.Next(ctx, 10, 10, 1<<20)
			require.NoError(t, err)
			require.Len(t, p.Rows, 5)
			require.NoError(t, sp.Close()) // SIGKILL before central's 200 is read

			sp = open(t, path, budget)
			mem, file, err := spool.InFlight(ctx, sp)
			require.NoError(t, err)
			assert.Equal(t, p.Rows[4].Seq, mem, "restored on open")
			assert.Equal(t, p.Rows[4].Seq, file)
			res, err = sp.Add(ctx, d[5:])
			require.NoError(t, err)
			assert.Equal(t, 3, res.Added)
			assert.Equal(t, tc.wantDropped, res.Dropped)
			assert.Zero(t, res.Over)

			again, err := sp.Next(ctx, 10, 10, 1<<20)
			require.NoError(t, err)
			assert.Equal(t, entries(p.Rows), entries(again.Rows[:5]), "the batch is resent whole")
			assert.Equal(t, entries(rowsOf(tc.wantKept)), entries(again.Rows))
			assert.Equal(t, int64(tc.wantDropped), gapCount(again.Gaps))
			for _, g := range again.Gaps {
				assert.Greater(t, g.FirstEntry, p.Rows[4].Entry, "a gap covers rows of the batch in flight")
			}
			assert.Equal(t, int64(len(d)), int64(len(again.Rows))+gapCount(again.Gaps))
		})
	}
}

// Once the sender settles its whole batch (Ack or Quarantine) nothing is
// in flight, on disk too. A batch settled in part (cut after an attempt of
// the whole that timed out) keeps the rest protected until the next Next,
// across a restart too: that attempt may have carried it to central, and
// a gap for events central has would count them twice. The budget drops
// the newer deltas instead.
func TestSpoolSettledBatchClearsInFlightMarker(t *testing.T) {
	d := deltas("a", 1, 6)
	settles := []struct {
		name   string
		settle func(context.Context, *spool.Spool, spool.Pending) error
	}{
		{"ack", func(ctx context.Context, sp *spool.Spool, p spool.Pending) error { return sp.Ack(ctx, p) }},
		{"quarantine", func(ctx context.Context, sp *spool.Spool, p spool.Pending) error {
			return sp.Quarantine(ctx, p, spool.Quarantined{Status: 400, Code: "invalid_batch", Body: []byte("{}")})
		}},
	}
	for _, part := range []struct {
		name      string
		settled   int    // rows of the batch of five settled
		wantMark  bool   // the marker stays on the batch's last row
		wantGap   string // the first entry the budget drops ("" none)
		wantAdded int
	}{
		{"whole", 5, false, "", 1},
		{"part", 2, true, d[5].Entry, 1},
	} {
		for _, tc := range settles {
			t.Run(part.name+" "+tc.name, func(t *testing.T) {
				ctx := context.Background()
				path := filepath.Join(t.TempDir(), spool.File)
				sp, err := spool.Open(ctx, path, 1<<20)
				require.NoError(t, err)
				_, err = sp.Add(ctx, d[:5])
				require.NoError(t, err)
				p, err := sp.Next(ctx, 10, 10, 1<<20)
				require.NoError(t, err)
				require.Len(t, p.Rows, 5)
				require.NoError(t, tc.settle(ctx, sp, spool.Pending{Rows: p.Rows[:part.settled]}))
				want := int64(0)
				if part.wantMark {
					want = p.Rows[4].Seq
				}
				mem, file, err := spool.InFlight(ctx, sp)
				require.NoError(t, err)
				assert.Equal(t, want, mem)
				assert.Equal(t, want, file)
				require.NoError(t, sp.Close())

				sp = open(t, path, rowsBudget(3, d[0]))
				mem, file, err = spool.InFlight(ctx, sp)
				require.NoError(t, err)
				assert.Equal(t, want, mem, "restored on open")
				assert.Equal(t, want, file)
				res, err := sp.Add(ctx, d[5:])
				require.NoError(t, err)
				assert.Equal(t, part.wantAdded, res.Added)
				next, err := sp.Next(ctx, 10, 10, 1<<20)
				require.NoError(t, err)
				if part.wantGap == "" {
					assert.Zero(t, res.Dropped)
					assert.Empty(t, next.Gaps)
					return
				}
				assert.Equal(t, 1, res.Dropped)
				require.Len(t, next.Gaps, 1)
				assert.Equal(t, part.wantGap, next.Gaps[0].FirstEntry, "the newest delta went, not one of the batch")
				assert.Equal(t, entries(rowsOf(d[part.settled:5])), entries(next.Rows), "the rest of the batch is sent again")
			})
		}
	}
}

// A move repeated before its XDEL succeeded (the XDEL failed, or the edge
// died before it) must spool nothing again: not what the first one
// dropped (shipped and counted in a gap, out of capture order), and not
// what the sender shipped and deleted meanwhile (shipped twice, and, once
// the budget dropped it, counted in a gap of events central has).
func TestSpoolRepeatedMoveSpoolsNothingAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
		shipped int // rows the sender shipped (acked) before the move was repeated
	}{
		{"xdel failed", false, 0},
		{"crash before xdel", true, 0},
		{"xdel failed, rows shipped", false, 3},
		{"crash before xdel, rows shipped", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), spool.File)
			caps := deltas("a", 1, 5)
			budget := rowsBudget(4, caps[0])
			sp, err := spool.Open(ctx, path, budget)
			require.NoError(t, err)
			t.Cleanup(func() { _ = sp.Close() })
			res, err := sp.Add(ctx, caps)
			require.NoError(t, err)
			assert.Equal(t, spool.AddResult{Added: 5, Dropped: 1}, res)
			first, err := sp.Next(ctx, 10, 10, 1<<20)
			require.NoError(t, err)
			require.Len(t, first.Gaps, 1)
			if tc.shipped > 0 {
				require.NoError(t, sp.Ack(ctx, spool.Pending{Rows: first.Rows[:tc.shipped], Gaps: first.Gaps}))
			}
			if tc.restart {
				require.NoError(t, sp.Close())
				sp = open(t, path, budget)
			}

			res, err = sp.Add(ctx, caps)
			require.NoError(t, err)
			assert.Equal(t, spool.AddResult{}, res)
			// More captures push the spool over its budget: a shipped row
			// spooled again would be dropped first, into a gap.
			more := deltas("a", 6, 7)
			_, err = sp.Add(ctx, more)
			require.NoError(t, err)
			p, err := sp.Next(ctx, 10, 10, 1<<20)
			require.NoError(t, err)
			for _, r := range p.Rows {
				for _, s := range first.Rows[:tc.shipped] {
					assert.NotEqual(t, s.Entry, r.Entry, "a shipped row spooled again")
				}
			}
			for _, g := range p.Gaps {
				for _, s := range first.Rows[:tc.shipped] {
					assert.True(t, s.Entry < g.FirstEntry || s.Entry > g.LastEntry, "a shipped row counted in a gap")
				}
			}
			all := int64(len(caps) + len(more))
			var gapped int64 // acked with the shipped rows
			if tc.shipped > 0 {
				gapped = gapCount(first.Gaps)
			}
			assert.Equal(t, all, int64(tc.shipped)+int64(len(p.Rows))+gapped+gapCount(p.Gaps), "every capture once")

			n, err := spool.Tombstones(ctx, sp)
			require.NoError(t, err)
			assert.Equal(t, all, n)
			require.NoError(t, sp.Moved(ctx, caps, false))
			require.NoError(t, sp.Moved(ctx, more, false))
			n, err = spool.Tombstones(ctx, sp)
			require.NoError(t, err)
			assert.Zero(t, n, "pruned once the entries left Redis")
		})
	}
}

// Moved deletes only the tombstones of the captures it is given.
func TestSpoolMovedForgetsOnlyItsTombstones(t *testing.T) {
	ctx := context.Background()
	first := deltas("a", 1, 5)
	sp := open(t, filepath.Join(t.TempDir(), spool.File), rowsBudget(4, first[0]))
	tombs := func() int64 {
		t.Helper()
		n, err := spool.Tombstones(ctx, sp)
		require.NoError(t, err)
		return n
	}
	res, err := sp.Add(ctx, first)
	require.NoError(t, err)
	require.Equal(t, 1, res.Dropped)
	require.Equal(t, int64(5), tombs(), "every capture taken")

	require.NoError(t, sp.Moved(ctx, deltas("b", 1, 5), false))
	assert.Equal(t, int64(5), tombs(), "another job's entries")
	require.NoError(t, sp.Moved(ctx, first[:2], false))
	assert.Equal(t, int64(3), tombs())
	require.NoError(t, sp.Moved(ctx, first, false))
	assert.Zero(t, tombs())
	require.NoError(t, sp.Moved(ctx, nil, false))
}

// A tombstone outlives any jump of the edge's clock: a Jetson that wrote
// it with a clock far behind, and restarts after NTP set it right, still
// has the dropped entry on the capture stream.
func TestSpoolTombstoneSurvivesClockJump(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	caps := deltas("a", 1, 5)
	budget := rowsBudget(4, caps[0])
	sp, err := spool.Open(ctx, path, budget)
	require.NoError(t, err)
	res, err := sp.Add(ctx, caps)
	require.NoError(t, err)
	require.Equal(t, spool.AddResult{Added: 5, Dropped: 1}, res)
	require.NoError(t, spool.AgeTombstones(ctx, sp)) // the clock jumps two weeks forward
	require.NoError(t, sp.Close())                   // before the XDEL

	sp = open(t, path, budget)
	res, err = sp.Add(ctx, caps)
	require.NoError(t, err)
	assert.Equal(t, spool.AddResult{}, res, "the dropped entry came back")
	p, err := sp.Next(ctx, 10, 10, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, entries(rowsOf(caps[1:])), entries(p.Rows))
	assert.Equal(t, int64(len(caps)), int64(len(p.Rows))+gapCount(p.Gaps))
}

// Tombstones a crash between the XDEL and Moved left behind name entries
// no longer on the capture stream; they go with the first move that read
// the whole stream, and not with a move that read only its head.
func TestSpoolDrainedMovePrunesLeftTombstones(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	caps := deltas("a", 1, 5)
	budget := rowsBudget(4, caps[0])
	sp, err := spool.Open(ctx, path, budget)
	require.NoError(t, err)
	_, err = sp.Add(ctx, caps)
	require.NoError(t, err)
	require.NoError(t, sp.Close()) // after the XDEL, before Moved

	sp = open(t, path, budget+rowsBudget(10, caps[0]))
	n, err := spool.Tombstones(ctx, sp)
	require.NoError(t, err)
	require.Equal(t, int64(len(caps)), n, "kept across a restart")

	next := deltas("b", 1, 3)
	_, err = sp.Add(ctx, next[:2])
	require.NoError(t, err)
	require.NoError(t, sp.Moved(ctx, next[:2], false))
	n, err = spool.Tombstones(ctx, sp)
	require.NoError(t, err)
	assert.Equal(t, int64(len(caps)), n, "a read of the stream's head says nothing of the rest")

	_, err = sp.Add(ctx, next[2:])
	require.NoError(t, err)
	require.NoError(t, sp.Moved(ctx, next[2:], true))
	n, err = spool.Tombstones(ctx, sp)
	require.NoError(t, err)
	assert.Zero(t, n)
}

// A quarantine message is capped without splitting a UTF-8 character.
func TestQuarantineMessageCappedOnACharacter(t *testing.T) {
	ctx := context.Background()
	sp := open(t, filepath.Join(t.TempDir(), spool.File), 1<<20)
	_, err := sp.Add(ctx, deltas("a", 1, 1))
	require.NoError(t, err)
	p, err := sp.Next(ctx, 10, 10, 1<<20)
	require.NoError(t, err)
	msg := "x" + strings.Repeat("é", 400) // 2-byte runes, the cap falls inside one
	require.NoError(t, sp.Quarantine(ctx, p, spool.Quarantined{Status: 400, Code: "invalid_batch", Message: msg, Body: []byte("{}")}))
	got, err := spool.QuarantineMessages(ctx, sp)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.True(t, utf8.ValidString(got[0]))
	assert.LessOrEqual(t, len(got[0]), 512)
	assert.True(t, strings.HasPrefix(msg, got[0]))
	assert.Greater(t, len(got[0]), 500)
}

func rowsOf(caps []jobs.Captured) []spool.Row {
	out := make([]spool.Row, len(caps))
	for i, c := range caps {
		out[i] = spool.Row{JobID: c.JobID, Type: c.Type, Entry: c.Entry}
	}
	return out
}
