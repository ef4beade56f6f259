package spool_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// rawDB is a connection of the test's own to the spool file.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqldb.SQLiteDSN(path))
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// A file at another schema version than this program's is refused, and
// left as it is: its upgrade is the daemon's to make.
func TestOpenExistingRefusesAnotherSchemaVersion(t *testing.T) {
	ctx := context.Background()
	for _, v := range []int{0, 1, 3} {
		path := filepath.Join(t.TempDir(), spool.File)
		sp := open(t, path, 1<<20)
		require.NoError(t, sp.Close())
		db := rawDB(t, path)
		_, err := db.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v))
		require.NoError(t, err)

		_, err = spool.OpenExisting(ctx, path, 1<<20)
		require.ErrorIs(t, err, spool.ErrSchemaVersion)
		_, err = spool.OpenReadOnly(ctx, path)
		require.ErrorIs(t, err, spool.ErrSchemaVersion)
		var got int
		require.NoError(t, db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&got))
		assert.Equal(t, v, got, "the command changed the file's version")
	}
}

// The list command's connection reads while the daemon holds the file's
// write lock, and cannot write.
func TestOpenReadOnlyNeitherWaitsNorWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	sp := open(t, path, 1<<20)
	_, id := refuse(t, sp, wire.CodeInvalidBatch, ev("a", 1, "done", "{}"))

	tx, err := rawDB(t, path).BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	require.NoError(t, err)
	defer tx.Rollback()
	start := time.Now()
	ro, err := spool.OpenReadOnly(ctx, path)
	require.NoError(t, err)
	defer ro.Close()
	q, err := ro.QuarantineList(ctx)
	require.NoError(t, err)
	require.Len(t, q, 1)
	assert.Less(t, time.Since(start), 5*time.Second, "the read waited on the write lock")
	require.NoError(t, tx.Rollback())

	_, err = ro.Resend(ctx, []int64{id})
	require.Error(t, err)
	assert.Equal(t, []int64{id}, quarantineIDs(t, sp), "a read-only connection wrote")
}

// A resend keeps to the budget the daemon recorded when it is smaller
// than the command's own (a shell without the unit's environment has the
// default), and to the command's when that is smaller.
func TestResendKeepsToTheSmallerBudget(t *testing.T) {
	ctx := context.Background()
	big := ev("a", 1, "done", `{"text":"a result of some length"}`)
	queued := ev("b", 3, "queued", "{}")
	room := spool.SizeOf(queued) + spool.SizeOf(big) // what spooled and resent take
	for _, tc := range []struct {
		name            string
		daemon, command int64
		ok              bool
	}{
		{"daemon's smaller", room - 1, 1 << 30, false},
		{"command's smaller", 1 << 30, room - 1, false},
		{"both have room", room, room, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), spool.File)
			sp := open(t, path, tc.daemon)
			_, id := refuse(t, sp, wire.CodeInvalidBatch, big)
			_, err := sp.Add(ctx, []jobs.Captured{queued})
			require.NoError(t, err)

			op, err := spool.OpenExisting(ctx, path, tc.command)
			require.NoError(t, err)
			defer op.Close()
			_, err = op.Resend(ctx, []int64{id})
			if !tc.ok {
				require.ErrorIs(t, err, spool.ErrOverBudget)
				assert.Equal(t, []int64{id}, quarantineIDs(t, sp))
				return
			}
			require.NoError(t, err)
			assert.Empty(t, quarantineIDs(t, sp))
		})
	}
}

// An event the edge set aside itself was kept, by edges before
// wire.Marshal, with its data HTML-escaped (< as \u003c, six bytes for
// one). Data just under the 64 KiB cap comes back whole, not as a note of
// its size, which would lose it once its quarantine row is gone.
func TestResendUnescapesDataNearTheCap(t *testing.T) {
	ctx := context.Background()
	sp := open(t, filepath.Join(t.TempDir(), spool.File), 1<<22)
	text := strings.Repeat("<&>", (wire.MaxDataBytes-64)/3)
	data := `{"text":"` + text + `","quote":"\"\\u003c\u2028"}`
	require.Less(t, len(data), wire.MaxDataBytes)
	_, err := sp.Add(ctx, []jobs.Captured{ev("a", 1, "done", data)})
	require.NoError(t, err)
	p, err := sp.Next(ctx, 1, 0, 1<<22)
	require.NoError(t, err)
	body, err := json.Marshal(wireEvent(p.Rows[0])) // HTML-escaped, as an older edge kept it
	require.NoError(t, err)
	require.Greater(t, len(body), 3*wire.MaxDataBytes)
	require.NoError(t, sp.Quarantine(ctx, p, spool.Quarantined{Code: spool.CodeInvalidEvent, Message: "x", Body: body}))
	ids := quarantineIDs(t, sp)

	_, err = sp.Resend(ctx, ids)
	require.NoError(t, err)
	got := pending(t, sp)
	require.Len(t, got.Rows, 1)
	assert.JSONEq(t, data, got.Rows[0].Data)
	assert.LessOrEqual(t, len(got.Rows[0].Data), len(data), "the data came back at its size")
}

// Only the escapes HTML escaping writes are undone; a backslash that
// escapes a backslash keeps what follows it text.
func TestUnescapeHTML(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{}`, `{}`},
		{`"\u003cb\u003e \u0026"`, `"<b> &"`},
		{`"\u003Cb\u003E"`, `"<b>"`},
		{`"\u2028\u2029"`, "\"\u2028\u2029\""},
		{`"\\u003c"`, `"\\u003c"`},
		{`"\\\u003c"`, `"\\<"`},
		{`"\"\n\u00e9\u003"`, `"\"\n\u00e9\u003"`},
		{`"\`, `"\`},
	} {
		assert.Equal(t, tc.want, string(spool.UnescapeHTML([]byte(tc.in))), tc.in)
	}
}

// A resend that finds the daemon's transaction holding the file past its
// busy timeout gives up, changing nothing, and says to run it again.
func TestResendGivesUpOnABusyFile(t *testing.T) {
	spool.ShortenOperatorBusy(t, 200)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	sp := open(t, path, 1<<20)
	_, id := refuse(t, sp, wire.CodeInvalidBatch, ev("a", 1, "done", "{}"))
	op := spool.MustOpenExisting(t, path)

	tx, err := rawDB(t, path).BeginTx(ctx, nil) // BEGIN IMMEDIATE, as the daemon's Add
	require.NoError(t, err)
	_, err = op.Resend(ctx, []int64{id})
	require.NoError(t, tx.Rollback())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nothing was resent: run the command again")
	assert.LessOrEqual(t, len(err.Error()), 512)
	assert.Equal(t, []int64{id}, quarantineIDs(t, sp))
	assert.Empty(t, pending(t, sp).Rows)

	_, err = op.Resend(ctx, []int64{id})
	require.NoError(t, err, "once the file is free")
	assert.Empty(t, quarantineIDs(t, sp))
}

// The daemon's budget counts what a resend by another connection put
// back: its next move drops the oldest delta to make room, as if it had
// spooled the resent rows itself.
func TestDaemonMakesRoomForWhatAResendTook(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	done := ev("b", 1, "done", "{}")
	d := func(n int) jobs.Captured { return ev("a", n, "delta", `{"t":"some streamed text"}`) }
	budget := spool.SizeOf(d(2)) + spool.SizeOf(d(3)) + spool.SizeOf(done)
	sp := open(t, path, budget)
	_, id := refuse(t, sp, wire.CodeInvalidBatch, done)
	_, err := sp.Add(ctx, []jobs.Captured{d(2), d(3)})
	require.NoError(t, err)

	_, err = spool.MustOpenExisting(t, path).Resend(ctx, []int64{id})
	require.NoError(t, err)
	res, err := sp.Add(ctx, []jobs.Captured{d(4)})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Dropped, "the daemon saw the room the resend took")
	st, err := sp.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, budget, st.Bytes)
	assert.Zero(t, st.OverBudget)
	assert.Equal(t, []string{"a/delta/1700000000003-0", "b/done/1700000000001-0", "a/delta/1700000000004-0"}, entries(pending(t, sp).Rows))
}

// A batch central refused with both events and gaps goes back whole.
func TestResendPutsABatchOfEventsAndGapsBack(t *testing.T) {
	ctx := context.Background()
	sp := open(t, filepath.Join(t.TempDir(), spool.File), 1<<20)
	_, err := sp.Add(ctx, []jobs.Captured{ev("a", 1, "queued", "{}")})
	require.NoError(t, err)
	_, err = sp.AddGaps(ctx, []spool.Gap{{JobID: "a", Type: "delta", Count: 2, FirstEntry: "5-0", LastEntry: "6-0", FirstTS: 5, LastTS: 6}})
	require.NoError(t, err)
	p := pending(t, sp)
	require.Len(t, p.Rows, 1)
	require.Len(t, p.Gaps, 1)
	require.NoError(t, sp.Quarantine(ctx, p, spool.Quarantined{Status: 400, Code: wire.CodeInvalidBatch, Body: batchBody(t, p)}))
	require.True(t, pending(t, sp).Empty())

	res, err := sp.ResendAll(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Events)
	assert.Equal(t, 1, res.Gaps)
	got := pending(t, sp)
	assert.Equal(t, entries(p.Rows), entries(got.Rows))
	require.Len(t, got.Gaps, 1)
	p.Gaps[0].ID = got.Gaps[0].ID
	assert.Equal(t, p.Gaps, got.Gaps)
	assert.Empty(t, quarantineIDs(t, sp))
}

// A file written by a daemon from before the budget table (not restarted
// since the upgrade) is resent to with the command's own budget.
func TestResendWithoutARecordedBudget(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), spool.File)
	sp := open(t, path, 1<<20)
	_, id := refuse(t, sp, wire.CodeInvalidBatch, ev("a", 1, "done", "{}"))
	_, err := rawDB(t, path).ExecContext(ctx, `DROP TABLE budget`)
	require.NoError(t, err)

	op, err := spool.OpenExisting(ctx, path, 1<<20)
	require.NoError(t, err)
	defer op.Close()
	_, err = op.Resend(ctx, []int64{id})
	require.NoError(t, err)
	assert.Empty(t, quarantineIDs(t, sp))
}
