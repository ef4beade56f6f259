package jobs_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
