package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// quarantineSpool is a daemon's spool in a state directory of its own.
type quarantineSpool struct {
	t     *testing.T
	state string
	sp    *spool.Spool
	n     int
}

func newQuarantineSpool(t *testing.T, budget int64) *quarantineSpool {
	t.Helper()
	state := t.TempDir()
	sp, err := spool.Open(context.Background(), filepath.Join(state, spool.File), budget)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sp.Close() })
	return &quarantineSpool{t: t, state: state, sp: sp}
}

// add spools one event of job with data and returns it.
func (q *quarantineSpool) add(job, typ, data string) {
	q.t.Helper()
	q.n++
	_, err := q.sp.Add(context.Background(), []jobs.Captured{{JobID: job, Entry: fmt.Sprintf("%d-0", 1700000000000+q.n),
		Type: typ, Step: "worker", Task: "chat", TS: int64(1700000000000 + q.n), Data: data}})
	require.NoError(q.t, err)
}

// refuseNext quarantines the oldest event as the shipper does when
// central refuses it (with its batch as body), or without a body.
func (q *quarantineSpool) refuseNext(message string, body bool) {
	q.t.Helper()
	ctx := context.Background()
	p, err := q.sp.Next(ctx, 1, 0, 1<<30)
	require.NoError(q.t, err)
	require.Len(q.t, p.Rows, 1)
	var raw []byte
	if body {
		r := p.Rows[0]
		e := wire.NewEvent("jetson-1", r.JobID, r.Entry, r.Type, r.Step, r.TS, json.RawMessage(r.Data))
		raw, err = wire.Encode(wire.Batch{EdgeID: "jetson-1", Events: []wire.Event{e}})
		require.NoError(q.t, err)
	}
	require.NoError(q.t, q.sp.Quarantine(ctx, p, spool.Quarantined{Status: 400, Code: wire.CodeInvalidBatch, Message: message, Body: raw}))
}

// run runs euterpe-edge with args against the spool's state directory.
func (q *quarantineSpool) run(env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		if k == "EUTERPE_STATE_DIR" {
			return q.state
		}
		return ""
	}
	code = run(context.Background(), args, &out, &errb, getenv)
	return code, out.String(), errb.String()
}

func (q *quarantineSpool) list() []quarantineLine {
	q.t.Helper()
	code, out, stderr := q.run(nil, "sync", "quarantine", "list")
	require.Equal(q.t, 0, code, stderr)
	lines := []quarantineLine{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var ql quarantineLine
		require.NoError(q.t, json.Unmarshal([]byte(l), &ql), l)
		lines = append(lines, ql)
	}
	return lines
}

// The operator lists what central refused, resends one batch by id (its
// event is spooled again, the daemon's totals follow), is told when an id
// is gone, and resends the rest with --all, which leaves what keeps no
// body.
func TestSyncQuarantineListAndResend(t *testing.T) {
	ctx := context.Background()
	q := newQuarantineSpool(t, 64<<20)
	q.add("job-a", "done", `{"text":"<b>ok</b>"}`)
	q.add("job-b", "queued", `{}`)
	q.add("job-c", "queued", `{}`)
	long := `{"error":{"code":"invalid_batch","message":"` + strings.Repeat("é", 400) + `"}}`
	q.refuseNext(long, true)
	q.refuseNext(`{"error":{"code":"invalid_batch"}}`, false)
	q.refuseNext(`{"error":{"code":"invalid_batch"}}`, true)

	got := q.list()
	require.Len(t, got, 3)
	assert.Equal(t, quarantineLine{ID: got[0].ID, At: got[0].At, Status: 400, Code: "invalid_batch", Message: got[0].Message,
		Events: 1, Resendable: true}, got[0])
	assert.LessOrEqual(t, len(got[0].Message), 512, "capped as stored")
	assert.True(t, strings.HasPrefix(long, strings.TrimSuffix(got[0].Message, "…")))
	assert.False(t, got[1].Resendable)
	assert.Regexp(t, `^\d{4}-\d\d-\d\dT`, got[0].At)

	code, out, stderr := q.run(nil, "sync", "quarantine", "resend", fmt.Sprint(got[0].ID))
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, resent{IDs: []int64{got[0].ID}, Events: 1}, resentOf(t, out))
	p, err := q.sp.Next(ctx, 10, 0, 1<<30)
	require.NoError(t, err)
	require.Len(t, p.Rows, 1)
	assert.Equal(t, "job-a", p.Rows[0].JobID)
	assert.Equal(t, `{"text":"<b>ok</b>"}`, p.Rows[0].Data)
	st, err := q.sp.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Events, "the daemon's totals follow the command's")
	assert.Equal(t, int64(2), st.Quarantined)

	code, out, stderr = q.run(nil, "sync", "quarantine", "resend", fmt.Sprint(got[0].ID), fmt.Sprint(got[2].ID))
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Contains(t, stderr, fmt.Sprintf("not in the quarantine: %d (resent or pruned since", got[0].ID))
	assert.Len(t, q.list(), 2, "nothing changed")

	code, out, stderr = q.run(nil, "sync", "quarantine", "resend", fmt.Sprint(got[1].ID))
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Contains(t, stderr, "keeps nothing to resend")

	code, out, stderr = q.run(nil, "sync", "quarantine", "resend", "--all")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, resent{IDs: []int64{got[2].ID}, Events: 1}, resentOf(t, out))
	assert.Contains(t, stderr, fmt.Sprintf("1 quarantined batches keep nothing to resend and stay: %d", got[1].ID))
	left := q.list()
	require.Len(t, left, 1)
	assert.Equal(t, got[1].ID, left[0].ID)
}

type resent struct {
	IDs    []int64 `json:"resent"`
	Events int     `json:"events"`
	Gaps   int     `json:"gaps"`
}

// resentOf reads resend's output; what it counts against the budget is
// there and positive.
func resentOf(t *testing.T, out string) resent {
	t.Helper()
	var r struct {
		resent
		Bytes int64 `json:"bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.Positive(t, r.Bytes)
	return r.resent
}

// Items that would take the spool's events past EUTERPE_SYNC_SPOOL_MAX_MB
// are not put back, and nothing changes.
func TestSyncQuarantineResendWithinBudget(t *testing.T) {
	q := newQuarantineSpool(t, 64<<20)
	big := `{"text":"` + strings.Repeat("x", 60<<10) + `"}`
	q.add("job-a", "done", big)
	q.refuseNext("refused", true)
	for i := range 17 {
		q.add(fmt.Sprintf("job-%d", i), "done", big) // undroppable: 17 × 60 KiB, within 1 MiB
	}
	id := q.list()[0].ID
	code, out, stderr := q.run(map[string]string{"EUTERPE_SYNC_SPOOL_MAX_MB": "1"}, "sync", "quarantine", "resend", fmt.Sprint(id))
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Contains(t, stderr, "over the spool's budget")
	assert.Contains(t, stderr, "nothing was resent")
	assert.Len(t, q.list(), 1)

	code, _, stderr = q.run(nil, "sync", "quarantine", "resend", fmt.Sprint(id))
	assert.Equal(t, 0, code, "within the default budget: %s", stderr)
}

// Command lines the commands cannot act on are refused before the spool is
// opened, or, for a state directory without a spool, without creating one.
func TestSyncQuarantineRefusals(t *testing.T) {
	q := newQuarantineSpool(t, 64<<20)
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		says string
	}{
		{"no command", nil, []string{"sync"}, 2, "usage: euterpe-edge sync quarantine"},
		{"unknown command", nil, []string{"sync", "quarantine", "purge"}, 2, "usage: euterpe-edge sync quarantine"},
		{"resend without ids", nil, []string{"sync", "quarantine", "resend"}, 2, "give the ids to resend"},
		{"ids and --all", nil, []string{"sync", "quarantine", "resend", "--all", "3"}, 2, "either the ids to resend or --all"},
		{"flag after ids", nil, []string{"sync", "quarantine", "resend", "3", "--all"}, 2, "flags go before the ids"},
		{"not a number", nil, []string{"sync", "quarantine", "resend", "x3"}, 2, `"x3" is not a quarantine id`},
		{"list with an argument", nil, []string{"sync", "quarantine", "list", "3"}, 2, "list takes no argument"},
		{"relative state dir", map[string]string{"EUTERPE_STATE_DIR": "state"}, []string{"sync", "quarantine", "list"}, 2, "EUTERPE_STATE_DIR"},
		{"no spool", map[string]string{"EUTERPE_STATE_DIR": empty}, []string{"sync", "quarantine", "list"}, 1, "no sync spool at " + empty},
		{"unknown id", nil, []string{"sync", "quarantine", "resend", "99"}, 1, "not in the quarantine: 99"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := q.run(tc.env, tc.args...)
			assert.Equal(t, tc.code, code, stderr)
			assert.Empty(t, out)
			assert.Contains(t, stderr, tc.says)
		})
	}
	assert.NoFileExists(t, filepath.Join(empty, spool.File))
}

// Run as another user than the spool's (root, say), the commands refuse:
// the WAL files SQLite would create could keep the daemon from its spool.
func TestSyncQuarantineRunsOnlyAsTheSpoolsOwner(t *testing.T) {
	q := newQuarantineSpool(t, 64<<20)
	q.add("job-a", "queued", `{}`)
	q.refuseNext("refused", true)
	was := euid
	t.Cleanup(func() { euid = was })
	euid = func() int { return os.Geteuid() + 1 }
	code, out, stderr := q.run(nil, "sync", "quarantine", "resend", "--all")
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Contains(t, stderr, "run it as the daemon's user")
	euid = was
	assert.Len(t, q.list(), 1, "nothing changed")
}
