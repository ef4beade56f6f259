package spool_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

const edgeID = "jetson-1"

func wireEvent(r spool.Row) wire.Event {
	e := wire.NewEvent(edgeID, r.JobID, r.Entry, r.Type, r.Step, r.TS, json.RawMessage(r.Data))
	e.Task = r.Task
	return e
}

func wireGap(g spool.Gap) wire.Gap {
	return wire.Gap{GapID: wire.GapID(edgeID, g.JobID, g.FirstEntry), JobID: g.JobID, Type: g.Type, Count: g.Count,
		FirstEntryID: g.FirstEntry, LastEntryID: g.LastEntry, FirstTS: g.FirstTS, LastTS: g.LastTS}
}

// batchBody is p encoded as the shipper sends it.
func batchBody(t *testing.T, p spool.Pending) []byte {
	t.Helper()
	b := wire.Batch{EdgeID: edgeID, Events: []wire.Event{}}
	for _, r := range p.Rows {
		b.Events = append(b.Events, wireEvent(r))
	}
	for _, g := range p.Gaps {
		b.Dropped = append(b.Dropped, wireGap(g))
	}
	body, err := wire.Encode(b)
	require.NoError(t, err)
	return body
}

// refuse spools caps, takes them with Next and quarantines them as the
// shipper does under code (central's, or the edge's own for one item),
// returning the rows and the quarantine row's id.
func refuse(t *testing.T, sp *spool.Spool, code string, caps ...jobs.Captured) ([]spool.Row, int64) {
	t.Helper()
	ctx := context.Background()
	_, err := sp.Add(ctx, caps)
	require.NoError(t, err)
	p, err := sp.Next(ctx, len(caps), 0, 1<<20)
	require.NoError(t, err)
	require.Len(t, p.Rows, len(caps))
	var body []byte
	switch code {
	case spool.CodeInvalidEvent:
		body, err = json.Marshal(wireEvent(p.Rows[0]))
		require.NoError(t, err)
	case "unencodable":
	default:
		body = batchBody(t, p)
	}
	require.NoError(t, sp.Quarantine(ctx, p, spool.Quarantined{Status: 400, Code: code, Message: "refused", Body: body}))
	q, err := sp.QuarantineList(ctx)
	require.NoError(t, err)
	return p.Rows, q[len(q)-1].ID
}

// pending is everything left to send.
func pending(t *testing.T, sp *spool.Spool) spool.Pending {
	t.Helper()
	p, err := sp.Next(context.Background(), 1000, 1000, 1<<30)
	require.NoError(t, err)
	return p
}

func quarantineIDs(t *testing.T, sp *spool.Spool) []int64 {
	t.Helper()
	q, err := sp.QuarantineList(context.Background())
	require.NoError(t, err)
	ids := []int64{}
	for _, b := range q {
		ids = append(ids, b.ID)
	}
	return ids
}

// Each kind of quarantine body goes back as the rows (or gap) it was made
// of, after every row spooled since, with its entry id (so its event id on
// central) unchanged; the quarantine row goes in the same transaction and
// the totals follow.
func TestResendPutsItemsBack(t *testing.T) {
	ctx := context.Background()
	for _, code := range []string{wire.CodeInvalidBatch, wire.CodeTooLarge, spool.CodeInvalidEvent} {
		t.Run(code, func(t *testing.T) {
			sp := open(t, filepath.Join(t.TempDir(), spool.File), 1<<20)
			caps := []jobs.Captured{ev("a", 1, "queued", "{}"), ev("a", 2, "done", `{"text":"<b>é</b>"}`)}
			if code == spool.CodeInvalidEvent {
				caps = caps[1:]
			}
			rows, id := refuse(t, sp, code, caps...)
			_, err := sp.Add(ctx, []jobs.Captured{ev("b", 3, "queued", "{}")})
			require.NoError(t, err)

			res, err := sp.Resend(ctx, []int64{id})
			require.NoError(t, err)
			assert.Equal(t, []int64{id}, res.IDs)
			assert.Equal(t, len(rows), res.Events)
			assert.Empty(t, quarantineIDs(t, sp))
			st, err := sp.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(len(rows)+1), st.Events)
			assert.Zero(t, st.Quarantined)

			p := pending(t, sp)
			require.Len(t, p.Rows, len(rows)+1)
			assert.Equal(t, "b", p.Rows[0].JobID, "resent rows go after those spooled since")
			for i, r := range rows {
				got := p.Rows[i+1]
				// An item the edge set aside alone was kept as
				// json.Marshal wrote it, with markup escaped: it comes
				// back as it was spooled.
				r.Seq = got.Seq
				assert.Equal(t, r, got)
			}
		})
	}
}

// A gap the edge set aside itself, and a batch of gaps central refused,
// go back as sealed gaps under their old ids.
func TestResendPutsGapsBack(t *testing.T) {
	ctx := context.Background()
	sp := open(t, filepath.Join(t.TempDir(), spool.File), 1<<20)
	g := spool.Gap{JobID: "a", Type: "delta", Count: 3, FirstEntry: "5-0", LastEntry: "7-0", FirstTS: 5, LastTS: 7}
	_, err := sp.AddGaps(ctx, []spool.Gap{g})
	require.NoError(t, err)
	p := pending(t, sp)
	require.Len(t, p.Gaps, 1)
	body, err := json.Marshal(wireGap(p.Gaps[0]))
	require.NoError(t, err)
	require.NoError(t, sp.Quarantine(ctx, p, spool.Quarantined{Code: spool.CodeInvalidGap, Body: body}))

	res, err := sp.ResendAll(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Gaps)
	p = pending(t, sp)
	require.Len(t, p.Gaps, 1)
	g.ID = p.Gaps[0].ID
	assert.Equal(t, g, p.Gaps[0])
	assert.Empty(t, quarantineIDs(t, sp))
}

// A resend that cannot be done whole changes nothing: an id not in the
// quarantine (alone or with one that is), a row that keeps no body, items
// the budget has no room for.
func TestResendRefusedChangesNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		budget int64
		ids    func(ok, bodiless int64) []int64
		want   error
	}{
		{"unknown id", 1 << 20, func(ok, _ int64) []int64 { return []int64{ok + 100} }, spool.ErrNotQuarantined},
		{"known and unknown", 1 << 20, func(ok, _ int64) []int64 { return []int64{ok, ok + 100} }, spool.ErrNotQuarantined},
		{"no body", 1 << 20, func(ok, bodiless int64) []int64 { return []int64{ok, bodiless} }, spool.ErrNotResendable},
		{"over budget", 0, func(ok, _ int64) []int64 { return []int64{ok} }, spool.ErrOverBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), spool.File)
			sp := open(t, path, 1<<20)
			big := ev("a", 1, "done", `{"text":"a result of some length"}`)
			_, ok := refuse(t, sp, wire.CodeInvalidBatch, big)
			_, bodiless := refuse(t, sp, "unencodable", ev("a", 2, "done", "{}"))
			_, err := sp.Add(ctx, []jobs.Captured{ev("b", 3, "queued", "{}")})
			require.NoError(t, err)
			if tc.budget == 0 {
				// Room for what is spooled, not for the resent row too.
				require.NoError(t, sp.Close())
				sp = open(t, path, spool.SizeOf(ev("b", 3, "queued", "{}"))+spool.SizeOf(big)-1)
			}
			before := quarantineIDs(t, sp)
			stBefore, err := sp.Stats(ctx)
			require.NoError(t, err)

			_, err = sp.Resend(ctx, tc.ids(ok, bodiless))
			require.ErrorIs(t, err, tc.want)
			assert.LessOrEqual(t, len(err.Error()), 512)
			assert.Equal(t, before, quarantineIDs(t, sp))
			st, err := sp.Stats(ctx)
			require.NoError(t, err)
			assert.Equal(t, stBefore, st)
			p := pending(t, sp)
			require.Len(t, p.Rows, 1, "only what was spooled")
			assert.Equal(t, "b", p.Rows[0].JobID)
		})
	}
}

// ResendAll puts back what it can and leaves the rows without a body.
func TestResendAllKeepsWhatCannotBeResent(t *testing.T) {
	ctx := context.Background()
	sp := open(t, filepath.Join(t.TempDir(), spool.File), 1<<20)
	_, first := refuse(t, sp, wire.CodeInvalidBatch, ev("a", 1, "queued", "{}"))
	_, bodiless := refuse(t, sp, "unencodable", ev("a", 2, "running", "{}"))
	_, last := refuse(t, sp, spool.CodeInvalidEvent, ev("a", 3, "done", "{}"))
	res, err := sp.ResendAll(ctx)
	require.NoError(t, err)
	assert.Equal(t, []int64{first, last}, res.IDs)
	assert.Equal(t, []int64{bodiless}, res.Kept)
	assert.Equal(t, []int64{bodiless}, quarantineIDs(t, sp))
	assert.Equal(t, []string{"a/queued/1700000000001-0", "a/done/1700000000003-0"}, entries(pending(t, sp).Rows))
}

// Two resends of one id at once, each on its own connection as two
// commands are: exactly one puts the items back, the other finds the row
// gone; the rows are spooled once.
func TestConcurrentResendsOfOneID(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	daemon := open(t, path, 1<<20)
	_, id := refuse(t, daemon, wire.CodeInvalidBatch, ev("a", 1, "queued", "{}"), ev("a", 2, "done", "{}"))
	for round := range 10 {
		if round > 0 {
			p := pending(t, daemon)
			require.NoError(t, daemon.Quarantine(ctx, p, spool.Quarantined{Status: 400, Code: wire.CodeInvalidBatch, Body: batchBody(t, p)}))
			id = quarantineIDs(t, daemon)[0]
		}
		ops := []*spool.Spool{spool.MustOpenExisting(t, path), spool.MustOpenExisting(t, path)}
		errs := make([]error, len(ops))
		var wg sync.WaitGroup
		for i, op := range ops {
			wg.Add(1)
			go func() { defer wg.Done(); _, errs[i] = op.Resend(ctx, []int64{id}) }()
		}
		wg.Wait()
		var ok, gone int
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, spool.ErrNotQuarantined):
				gone++
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		require.Equal(t, 1, ok, "round %d", round)
		require.Equal(t, 1, gone, "round %d", round)
		assert.Empty(t, quarantineIDs(t, daemon))
		require.Len(t, pending(t, daemon).Rows, 2, "round %d: spooled once", round)
		st, err := daemon.Stats(ctx)
		require.NoError(t, err)
		assert.Equal(t, spool.Stats{Events: 2, Bytes: st.Bytes, OldestTS: 1700000000001}, st, "round %d", round)
	}
}

// The daemon's spool keeps its totals in memory; another connection's
// resend shows in them at the daemon's next transaction (the sender's
// Next, every second while idle), and they never go negative once the
// resent rows are shipped.
func TestTotalsFollowAResendByAnotherConnection(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	daemon := open(t, path, 1<<20)
	rows, id := refuse(t, daemon, wire.CodeInvalidBatch, ev("a", 1, "queued", "{}"), ev("a", 2, "done", "{}"))
	st, err := daemon.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, spool.Stats{Quarantined: 1}, st)

	op := spool.MustOpenExisting(t, path)
	res, err := op.Resend(ctx, []int64{id})
	require.NoError(t, err)
	opSt, err := op.Stats(ctx)
	require.NoError(t, err)

	p := pending(t, daemon)
	require.Len(t, p.Rows, len(rows))
	st, err = daemon.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, opSt, st, "the daemon's totals are the file's")
	assert.Equal(t, spool.Stats{Events: 2, Bytes: res.Bytes, OldestTS: 1700000000001}, st)

	require.NoError(t, daemon.Ack(ctx, p))
	st, err = daemon.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, spool.Stats{}, st)
}

// A resend run over and over while the daemon's connection moves, sends,
// acknowledges and quarantines on the same file: every item ends up sent
// exactly once or still quarantined, and the daemon's totals are the
// file's.
func TestResendBesideAShippingDaemon(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	daemon := open(t, path, 1<<20)
	op := spool.MustOpenExisting(t, path)
	const total = 90
	sent := map[string]int{}
	done := make(chan struct{})
	var resends sync.WaitGroup
	resends.Add(1)
	go func() {
		defer resends.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := op.ResendAll(ctx); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	// The daemon: captures arrive, every third batch is refused once per
	// item, everything else is acknowledged.
	refused := map[string]bool{}
	for n := 1; n <= total || len(sent) < total; n++ {
		require.Less(t, n, 100*total, "the resends never brought everything back")
		if n <= total {
			_, err := daemon.Add(ctx, []jobs.Captured{ev("j", n, "delta", "{}")})
			require.NoError(t, err)
		}
		p, err := daemon.Next(ctx, 5, 0, 1<<20)
		require.NoError(t, err)
		if len(p.Rows) == 0 {
			continue
		}
		key := p.Rows[0].Entry
		if n%3 == 0 && !refused[key] {
			refused[key] = true
			one := spool.Pending{Rows: p.Rows[:1]}
			require.NoError(t, daemon.Quarantine(ctx, one, spool.Quarantined{Status: 400, Code: wire.CodeInvalidBatch, Body: batchBody(t, one)}))
			continue
		}
		require.NoError(t, daemon.Ack(ctx, p))
		for _, r := range p.Rows {
			sent[r.Entry]++
		}
	}
	close(done)
	resends.Wait()
	for e, c := range sent {
		require.Equal(t, 1, c, "entry %s sent %d times", e, c)
	}
	assert.Len(t, sent, total)
	assert.NotEmpty(t, refused)
	_, err := daemon.Next(ctx, 1, 0, 1<<20)
	require.NoError(t, err)
	st, err := daemon.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, spool.Stats{}, st)
}

// OpenExisting does not create a spool where there is none.
func TestOpenExistingWantsAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), spool.File)
	_, err := spool.OpenExisting(context.Background(), path, 1<<20)
	require.ErrorIs(t, err, spool.ErrNoSpool)
	assert.NoFileExists(t, path)
}
