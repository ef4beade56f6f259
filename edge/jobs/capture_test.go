package jobs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Every event the scripts write, through every write path (create, apply,
// the pipelined batch, cancel, a refused write), is captured with the
// same entry id, fields and the job's task; nothing else is.
func TestCaptureMirrorsEveryEvent(t *testing.T) {
	st, rdb := newStore(t)
	st.Capture = jobs.CaptureStream
	ctx := context.Background()

	a := create(t, st)
	b := create(t, st)
	_, err := st.SetRunning(ctx, a, "worker.start", nil)
	require.NoError(t, err)
	_, err = st.AppendEvent(ctx, a, "delta", "worker.delta", json.RawMessage(`{"text":"he"}`))
	require.NoError(t, err)
	res := st.ApplyBatch(ctx, []jobs.Op{
		{ID: a, T: jobs.Transition{To: jobs.Done, Step: "worker.finish", Result: json.RawMessage(`{"text":"hello"}`)}},
		{ID: b, T: jobs.Transition{To: jobs.Running, Step: "worker.start"}},
	})
	require.NoError(t, res[0].Err)
	require.NoError(t, res[1].Err)
	_, err = st.Cancel(ctx, b, "gateway.cancel", "client")
	require.NoError(t, err)
	_, err = st.Cancel(ctx, a, "gateway.cancel", "late") // refused: writes no event, captures none
	require.ErrorIs(t, err, jobs.ErrFinished)

	var want []jobs.Captured
	for _, id := range []string{a, b} {
		for _, m := range rdb.XRange(ctx, jobs.EventsKey(id), "-", "+").Val() {
			e := jobs.EventFromValues(m.ID, m.Values)
			want = append(want, jobs.Captured{JobID: id, Entry: m.ID, Type: e.Type, Step: e.Step, Task: "chat", TS: e.TS, Data: string(e.Data)})
		}
	}
	var got []jobs.Captured
	for _, m := range rdb.XRange(ctx, jobs.CaptureStream, "-", "+").Val() {
		c := jobs.CapturedFromValues(m.ID, m.Values)
		c.ID = ""
		got = append(got, c)
	}
	assert.ElementsMatch(t, want, got)
	assert.Len(t, got, 7)
	// Capture order is write order: per job, entries ascend.
	last := map[string]string{}
	for _, c := range got {
		if p, ok := last[c.JobID]; ok {
			pa, _ := jobs.ParseStreamID(p)
			ca, _ := jobs.ParseStreamID(c.Entry)
			assert.True(t, pa.Less(ca), "job %s: %s after %s", c.JobID, c.Entry, p)
		}
		last[c.JobID] = c.Entry
	}
}

// With sync off (Capture empty), the capture stream is never created.
func TestCaptureOffWritesNothing(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	id := create(t, st)
	_, err := st.SetRunning(ctx, id, "worker.start", nil)
	require.NoError(t, err)
	_, err = st.Finish(ctx, id, jobs.Done, "worker.finish", json.RawMessage(`{}`), nil, "")
	require.NoError(t, err)
	assert.Equal(t, int64(0), rdb.Exists(ctx, jobs.CaptureStream).Val())
}

// With the capture stream at its cap (Store.CaptureMax), a delta is still
// written to its job's stream but not captured: the scripts record the
// drop in the job's field of the drops hash instead (first and last entry
// and ts, count). Lifecycle and terminal events are captured whatever the
// stream holds. Taking the drops hands the same record out again until it
// is released, so a mover that died in between loses none.
func TestCaptureCapDropsDeltasOnly(t *testing.T) { testsvc.EachRedis(t, testCaptureCapDropsDeltasOnly) }

func testCaptureCapDropsDeltasOnly(t *testing.T) {
	st, rdb := newStore(t)
	st.Capture = jobs.CaptureStream
	st.CaptureMax = 5
	ctx := context.Background()
	delta := func(id string) string {
		e, err := st.AppendEvent(ctx, id, "delta", "worker.delta", json.RawMessage(`{"text":"t"}`))
		require.NoError(t, err)
		return e
	}

	a := create(t, st)
	_, err := st.SetRunning(ctx, a, "worker.start", nil)
	require.NoError(t, err)
	delta(a)
	delta(a)
	delta(a) // the fifth entry: the stream is at its cap
	first := delta(a)
	res := st.ApplyBatch(ctx, []jobs.Op{{ID: a, T: jobs.Transition{EventType: "delta", Step: "worker.delta", Data: json.RawMessage(`{}`)}}})
	require.NoError(t, res[0].Err)
	last := res[0].EventID
	_, err = st.SetRunning(ctx, a, "worker.restart", nil) // a lifecycle event: captured
	require.NoError(t, err)
	_, err = st.Finish(ctx, a, jobs.Done, "worker.finish", json.RawMessage(`{"text":"ok"}`), nil, "")
	require.NoError(t, err)
	b := create(t, st)

	assert.Equal(t, int64(9), rdb.XLen(ctx, jobs.EventsKey(a)).Val(), "the job's own stream has every event")
	var types []string
	for _, m := range rdb.XRange(ctx, jobs.CaptureStream, "-", "+").Val() {
		c := jobs.CapturedFromValues(m.ID, m.Values)
		types = append(types, c.JobID[:1]+c.Type)
		require.False(t, c.JobID == a && (c.Entry == first || c.Entry == last), "a dropped delta was captured")
	}
	assert.Equal(t, []string{a[:1] + "queued", a[:1] + "running", a[:1] + "delta", a[:1] + "delta", a[:1] + "delta",
		a[:1] + "running", a[:1] + "done", b[:1] + "queued"}, types)

	ts := func(entry string) int64 {
		m := rdb.XRange(ctx, jobs.EventsKey(a), entry, entry).Val()
		require.Len(t, m, 1)
		return jobs.EventFromValues(m[0].ID, m[0].Values).TS
	}
	want := []jobs.Drop{{JobID: a, Count: 2, FirstEntry: first, LastEntry: last, FirstTS: ts(first), LastTS: ts(last)}}
	assert.Equal(t, "2", rdb.Get(ctx, jobs.CaptureDroppedTotal).Val())
	for i := 0; i < 2; i++ { // taken again: not yet released
		got, bad, _, err := jobs.TakeDrops(ctx, rdb, jobs.CaptureStream)
		require.NoError(t, err)
		assert.Zero(t, bad)
		assert.Equal(t, want, got, "take %d", i)
	}
	// Drops after the take are kept apart, for the next take.
	require.NoError(t, rdb.XTrimMaxLen(ctx, jobs.CaptureStream, 5).Err())
	c := create(t, st)
	_, err = st.SetRunning(ctx, c, "worker.start", nil)
	require.NoError(t, err)
	late := delta(c)
	require.NoError(t, jobs.ReleaseDrops(ctx, rdb, jobs.CaptureStream))
	got, _, _, err := jobs.TakeDrops(ctx, rdb, jobs.CaptureStream)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, c, got[0].JobID)
	assert.Equal(t, late, got[0].FirstEntry)
	assert.Equal(t, int64(1), got[0].Count)
	require.NoError(t, jobs.ReleaseDrops(ctx, rdb, jobs.CaptureStream))
	got, _, _, err = jobs.TakeDrops(ctx, rdb, jobs.CaptureStream)
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.Equal(t, "3", rdb.Get(ctx, jobs.CaptureDroppedTotal).Val(), "every drop counted")

	// Below the cap, deltas are captured again.
	require.NoError(t, rdb.Del(ctx, jobs.CaptureStream).Err())
	d := create(t, st)
	_, err = st.SetRunning(ctx, d, "worker.start", nil)
	require.NoError(t, err)
	delta(d)
	assert.Equal(t, int64(3), rdb.XLen(ctx, jobs.CaptureStream).Val())
}

// A drop record's times are the earliest and latest of its drops, not the
// first's and the last's: the edge's clock can step back (NTP on a board
// without a battery-backed clock), and a gap whose last_ts is before its
// first_ts is refused by central (wire.Gap), so the hole would never be
// reported. The entry ids still come from the first and the last drop.
func TestCaptureCapDropTimesStayOrdered(t *testing.T) {
	testsvc.EachRedis(t, testCaptureCapDropTimesStayOrdered)
}

func testCaptureCapDropTimesStayOrdered(t *testing.T) {
	st, rdb := newStore(t)
	st.Capture = jobs.CaptureStream
	st.CaptureMax = 2
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_005_000)
	st.Now = func() time.Time { return now }
	a := create(t, st)
	_, err := st.SetRunning(ctx, a, "worker.start", nil) // the stream is at its cap
	require.NoError(t, err)
	var entries []string
	for _, step := range []time.Duration{0, -3 * time.Second, time.Second} {
		now = now.Add(step)
		e, err := st.AppendEvent(ctx, a, "delta", "worker.delta", json.RawMessage(`{"text":"t"}`))
		require.NoError(t, err)
		entries = append(entries, e)
	}
	got, bad, _, err := jobs.TakeDrops(ctx, rdb, jobs.CaptureStream)
	require.NoError(t, err)
	require.Zero(t, bad)
	assert.Equal(t, []jobs.Drop{{JobID: a, Count: 3, FirstEntry: entries[0], LastEntry: entries[2],
		FirstTS: 1_700_000_002_000, LastTS: 1_700_000_005_000}}, got)
}

// A drops total that is not a number (written by hand) must not fail a
// delta halfway: the script has written the event by then, and Redis does
// not roll a script back, so the worker would get an error for an event
// that is stored while the rest of the script (TTLs) never ran.
func TestCaptureCapUnreadableTotalDoesNotFailDeltas(t *testing.T) {
	testsvc.EachRedis(t, testCaptureCapUnreadableTotalDoesNotFailDeltas)
}

func testCaptureCapUnreadableTotalDoesNotFailDeltas(t *testing.T) {
	st, rdb := newStore(t)
	st.Capture = jobs.CaptureStream
	st.CaptureMax = 2
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, jobs.CaptureDroppedTotal, "many", 0).Err())
	a := create(t, st)
	_, err := st.SetRunning(ctx, a, "worker.start", nil)
	require.NoError(t, err)
	e, err := st.AppendEvent(ctx, a, "delta", "worker.delta", json.RawMessage(`{"text":"t"}`))
	require.NoError(t, err)
	got, _, _, err := jobs.TakeDrops(ctx, rdb, jobs.CaptureStream)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, e, got[0].FirstEntry)
	assert.Positive(t, rdb.TTL(ctx, jobs.EventsKey(a)).Val(), "the script ran to its end")
}
