package spool_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

func open(t *testing.T, path string, budget int64) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(context.Background(), path, budget)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sp.Close() })
	return sp
}

// ev is a captured event; entries are "<n>-0" so order is n's.
func ev(job string, n int, typ, data string) jobs.Captured {
	return jobs.Captured{JobID: job, Entry: fmt.Sprintf("%d-0", 1700000000000+n), Type: typ, Step: "s", Task: "chat",
		TS: int64(1700000000000 + n), Data: data}
}

func entries(rows []spool.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.JobID + "/" + r.Type + "/" + r.Entry
	}
	return out
}

func TestSpoolKeepsOrderAcrossReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	sp, err := spool.Open(ctx, path, 1<<20)
	require.NoError(t, err)
	in := []jobs.Captured{ev("a", 1, "queued", "{}"), ev("b", 2, "queued", "{}"), ev("a", 3, "running", "{}"), ev("a", 4, "done", `{"x":1}`)}
	res, err := sp.Add(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, 4, res.Added)
	// The same capture entries again (a crash between commit and XDEL): skipped.
	res, err = sp.Add(ctx, in[2:])
	require.NoError(t, err)
	assert.Equal(t, 0, res.Added)
	require.NoError(t, sp.Close())

	sp = open(t, path, 1<<20)
	st, err := sp.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(4), st.Events)
	assert.Equal(t, int64(1700000000001), st.OldestTS)
	p, err := sp.Next(ctx, 3, 10, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, []string{"a/queued/1700000000001-0", "b/queued/1700000000002-0", "a/running/1700000000003-0"}, entries(p.Rows))
	assert.Equal(t, "chat", p.Rows[0].Task)
	require.NoError(t, sp.Ack(ctx, p))
	p, err = sp.Next(ctx, 10, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, p.Rows, 1)
	assert.Equal(t, `{"x":1}`, p.Rows[0].Data)
	require.NoError(t, sp.Quarantine(ctx, p, spool.Quarantined{Status: 400, Code: "invalid_batch", Body: []byte("{}")}))
	st, err = sp.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, spool.Stats{Quarantined: 1}, st)
	q, err := sp.QuarantineList(ctx)
	require.NoError(t, err)
	require.Len(t, q, 1)
	assert.Equal(t, "invalid_batch", q[0].Code)
	assert.Equal(t, 1, q[0].Events)
}

// Over budget, only the oldest deltas go, never queued/running/terminal
// events, and not the rows in flight; each job's drops form one gap until
// the gap is handed out, after which new drops open a new gap.
func TestSpoolBudgetDropsOnlyOldestDeltas(t *testing.T) {
	ctx := context.Background()
	big := strings.Repeat("x", 1000)
	data := `{"text":"` + big + `"}`
	sp := open(t, filepath.Join(t.TempDir(), spool.File), 12_000) // room for ~11 such events

	var in []jobs.Captured
	n := 0
	add := func(job, typ, d string) { n++; in = append(in, ev(job, n, typ, d)) }
	for _, job := range []string{"a", "b"} {
		add(job, "queued", data)
		add(job, "running", data)
	}
	for i := 0; i < 6; i++ {
		add("a", "delta", data)
		add("b", "delta", data)
	}
	add("a", "done", data)
	add("b", "error", data)
	add("b", "canceled", "{}") // refused by the scripts in practice; here: never dropped either
	res, err := sp.Add(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, len(in), res.Added)
	assert.Greater(t, res.Dropped, 0)
	assert.Equal(t, int64(res.Dropped), sp.Dropped())
	st, err := sp.Stats(ctx)
	require.NoError(t, err)
	assert.LessOrEqual(t, st.Bytes, int64(12_000))

	p, err := sp.Next(ctx, 100, 100, 1<<20)
	require.NoError(t, err)
	kept := map[string]int{}
	for _, r := range p.Rows {
		kept[r.Type]++
	}
	assert.Equal(t, map[string]int{"queued": 2, "running": 2, "done": 1, "error": 1, "canceled": 1, "delta": 12 - res.Dropped}, kept)
	// The dropped deltas are the oldest: the kept ones are the newest.
	var deltas []int64
	for _, r := range p.Rows {
		if r.Type == "delta" {
			deltas = append(deltas, r.TS)
		}
	}
	for _, r := range in {
		if r.Type == "delta" && r.TS > deltas[0] {
			assert.Contains(t, deltas, r.TS)
		}
	}
	var count int64
	for _, g := range p.Gaps {
		count += g.Count
		assert.Equal(t, "delta", g.Type)
		assert.LessOrEqual(t, g.FirstEntry, g.LastEntry)
	}
	assert.Equal(t, int64(res.Dropped), count)
	assert.Len(t, p.Gaps, 2, "one gap per job")

	// Rows in flight (handed out by Next) are not dropped; new deltas past
	// them are, into new gaps (the handed-out ones are sealed).
	var more []jobs.Captured
	for i := 0; i < 4; i++ {
		n++
		more = append(more, ev("a", n, "delta", data))
	}
	res2, err := sp.Add(ctx, more)
	require.NoError(t, err)
	assert.Equal(t, 4, res2.Dropped, "the new deltas are the only ones not in flight")
	p2, err := sp.Next(ctx, 100, 100, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, entries(p.Rows), entries(p2.Rows))
	require.Len(t, p2.Gaps, 3)
	assert.Equal(t, p.Gaps, p2.Gaps[:2], "sealed gaps do not change")
	assert.Equal(t, int64(4), p2.Gaps[2].Count)
	assert.Equal(t, more[0].Entry, p2.Gaps[2].FirstEntry)
	assert.Equal(t, more[3].Entry, p2.Gaps[2].LastEntry)
	require.NoError(t, sp.Ack(ctx, p2))
	p3, err := sp.Next(ctx, 100, 100, 1<<20)
	require.NoError(t, err)
	assert.True(t, p3.Empty())
}

// A spool full of events that may not be dropped keeps them and says so.
func TestSpoolOverBudgetWithoutDeltasKeepsEverything(t *testing.T) {
	ctx := context.Background()
	sp := open(t, filepath.Join(t.TempDir(), spool.File), 500)
	var in []jobs.Captured
	for i := 0; i < 20; i++ {
		in = append(in, ev(fmt.Sprint("j", i), i+1, "queued", "{}"))
	}
	res, err := sp.Add(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, 20, res.Added)
	assert.Zero(t, res.Dropped)
	assert.Greater(t, res.Over, int64(0))
	st, err := sp.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, res.Over, st.OverBudget, "the excess is reported with the totals, not only by the Add")
}

// A terminal event's data is the job's whole result, and terminal events
// are never dropped: data over wire.MaxDataBytes, which only a note of its
// size would ever leave the edge as, is stored and counted as that note.
// A spool of such results stays within its budget, and holds exactly what
// will be sent.
func TestLargeDataIsSpooledAsSent(t *testing.T) {
	ctx := context.Background()
	result := `{"text":"` + strings.Repeat("r", 4*wire.MaxDataBytes) + `"}`
	latin := "{\"text\":\"caf\xe9\"}"
	const budget = 1 << 20
	sp := open(t, filepath.Join(t.TempDir(), spool.File), budget)
	var in []jobs.Captured
	for i := range 40 { // 10 MiB of results
		in = append(in, ev(fmt.Sprint("j", i), i+1, "done", result))
	}
	in = append(in, ev("j-latin", 41, "done", latin))
	res, err := sp.Add(ctx, in)
	require.NoError(t, err)
	assert.Equal(t, len(in), res.Added)
	assert.Zero(t, res.Over)

	p, err := sp.Next(ctx, 100, 100, 1<<30)
	require.NoError(t, err)
	require.Len(t, p.Rows, len(in))
	var size int64
	for i, r := range p.Rows {
		want := string(wire.Sendable([]byte(in[i].Data)))
		// Compared as a condition: a failure prints the sizes, not megabytes.
		assert.True(t, want == r.Data, "row %d is stored as it will be sent: %d bytes, want %d", i, len(r.Data), len(want))
		size += spool.SizeOf(in[i])
	}
	assert.JSONEq(t, fmt.Sprintf(`{"truncated":true,"bytes":%d}`, len(result)), p.Rows[0].Data)
	assert.Equal(t, "{\"text\":\"caf\uFFFD\"}", p.Rows[len(in)-1].Data)
	st, err := sp.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, size, st.Bytes, "counted as stored")
	assert.Less(t, st.Bytes, int64(budget))
	assert.Zero(t, st.OverBudget)
}

// The quarantine keeps within the spool's budget: the oldest batches go
// first, the newest always stays, and what went is counted.
func TestQuarantineKeepsWithinBudget(t *testing.T) {
	cases := []struct {
		name       string
		bodies     []int // sizes, oldest first
		wantKept   []int // indexes of bodies left, oldest first
		wantPruned int64
	}{
		{"under the budget", []int{300, 300, 300}, []int{0, 1, 2}, 0},
		{"oldest pruned first", []int{400, 400, 400, 400, 400}, []int{3, 4}, 3},
		{"the newest stays even alone over the budget", []int{400, 5000}, []int{1}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			sp, err := spool.Open(ctx, filepath.Join(t.TempDir(), "sync.db"), 1000)
			require.NoError(t, err)
			t.Cleanup(func() { sp.Close() })
			for i, size := range tc.bodies {
				_, err := sp.Add(ctx, []jobs.Captured{ev("j", i, "running", "{}")})
				require.NoError(t, err)
				p, err := sp.Next(ctx, 10, 10, 1<<20)
				require.NoError(t, err)
				require.Len(t, p.Rows, 1)
				body := fmt.Sprintf("%d:%s", i, strings.Repeat("x", size-len(fmt.Sprint(i))-1))
				require.NoError(t, sp.Quarantine(ctx, p, spool.Quarantined{Status: 400, Code: "invalid_batch", Body: []byte(body)}))
			}
			q, err := sp.QuarantineList(ctx)
			require.NoError(t, err)
			var kept []int
			for _, b := range q {
				var i int
				_, err := fmt.Sscanf(b.Body, "%d:", &i)
				require.NoError(t, err)
				kept = append(kept, i)
			}
			assert.Equal(t, tc.wantKept, kept)
			st, err := sp.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(len(tc.wantKept)), st.Quarantined)
			assert.Equal(t, tc.wantPruned, st.QuarantinePruned)
			assert.Equal(t, tc.wantPruned, sp.QuarantinePruned())
		})
	}
}

// A batch settled in part (cut to fit, or an event set aside) leaves rows
// older than the drops made while it was out. They stay in flight (an
// earlier attempt may have carried them to central), so later drops go on
// past them and the job's gap stays a run of entries in order, first to
// last.
func TestSpoolGapsStayOrderedAfterPartialSettle(t *testing.T) {
	ctx := context.Background()
	d := deltas("a", 1, 18)
	sp := open(t, filepath.Join(t.TempDir(), spool.File), rowsBudget(10, d[0]))
	_, err := sp.Add(ctx, d[:10])
	require.NoError(t, err)
	p, err := sp.Next(ctx, 10, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, p.Rows, 10)
	res, err := sp.Add(ctx, d[10:12]) // past the batch out: dropped
	require.NoError(t, err)
	require.Equal(t, 2, res.Dropped)
	require.NoError(t, sp.Ack(ctx, spool.Pending{Rows: p.Rows[:5]}))
	res, err = sp.Add(ctx, d[12:])
	require.NoError(t, err)
	require.Equal(t, 1, res.Dropped) // the oldest past the rows still in flight: d[12]

	p, err = sp.Next(ctx, 20, 10, 1<<20)
	require.NoError(t, err)
	for _, g := range p.Gaps {
		assert.LessOrEqual(t, g.FirstEntry, g.LastEntry, "gap %+v runs backwards", g)
	}
	assert.Equal(t, int64(3), gapCount(p.Gaps))
	assert.Equal(t, 18-5, len(p.Rows)+int(gapCount(p.Gaps)))
	assert.Equal(t, entries(rowsOf(append(d[5:10:10], d[13:]...))), entries(p.Rows))
}

// Gaps recorded elsewhere (the capture cap's drops in Redis) are added as
// they are, sealed, once each: adding the same gap again (a mover that
// died before Redis heard it was recorded) changes nothing while it is
// spooled. Once central accepted it, it is gone, and adding it again sends
// it again under the same gap id, which central deduplicates.
func TestAddGapsOnceEach(t *testing.T) {
	ctx := context.Background()
	sp := open(t, filepath.Join(t.TempDir(), spool.File), 1<<20)
	gaps := []spool.Gap{
		{JobID: "a", Type: "delta", Count: 3, FirstEntry: "1700000000005-0", LastEntry: "1700000000009-0", FirstTS: 5, LastTS: 9},
		{JobID: "b", Type: "delta", Count: 1, FirstEntry: "1700000000007-0", LastEntry: "1700000000007-0", FirstTS: 7, LastTS: 7},
	}
	n, err := sp.AddGaps(ctx, gaps)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	n, err = sp.AddGaps(ctx, gaps)
	require.NoError(t, err)
	assert.Zero(t, n, "added again")

	p, err := sp.Next(ctx, 10, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, p.Gaps, 2)
	got := append([]spool.Gap(nil), p.Gaps...)
	for i := range got {
		assert.Positive(t, got[i].ID)
		got[i].ID = 0
	}
	assert.Equal(t, gaps, got)
	require.NoError(t, sp.Ack(ctx, p))

	n, err = sp.AddGaps(ctx, gaps[:1])
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	p, err = sp.Next(ctx, 10, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, p.Gaps, 1)
	assert.Equal(t, "1700000000005-0", p.Gaps[0].FirstEntry)
}
