package ship

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// failXDel makes the next n XDELs of a client fail.
type failXDel struct{ n atomic.Int32 }

func (f *failXDel) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *failXDel) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xdel" && f.n.Add(-1) >= 0 {
			err := errors.New("injected: connection reset")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (f *failXDel) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// tombstones counts the spool file's tombstones, read beside the shipper's
// own connection.
func (h *harness) tombstones() int64 {
	h.t.Helper()
	db, err := sql.Open("sqlite", sqldb.SQLiteDSN(h.path))
	require.NoError(h.t, err)
	defer db.Close()
	var n int64
	require.NoError(h.t, db.QueryRow(`SELECT COUNT(*) FROM tombstones`).Scan(&n))
	return n
}

// A move whose XDEL failed, or that the edge did not live to finish, is
// repeated; what the first try dropped from the full spool must not come
// back: central would get those deltas and a gap counting them. The
// tombstones that prevent it are gone once the move is complete.
func TestRepeatedMoveShipsNoDroppedEvent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
	}{{"xdel failed", false}, {"crash before xdel", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const budget = 6_000
			h := newHarness(t, budget, nil)
			ids := h.jobs(2, 8, `{"text":"`+strings.Repeat("y", 900)+`"}`)
			want := h.written(ids)
			fail := &failXDel{}
			fail.n.Store(1)
			h.rdb.AddHook(fail)
			ctx := context.Background()

			_, err := h.sh.MoveOnce(ctx)
			require.Error(t, err)
			dropped := h.sh.Spool().Dropped()
			require.Greater(t, dropped, int64(0))
			require.Greater(t, h.tombstones(), int64(0), "the move dropped some of its own entries")
			if tc.restart {
				require.NoError(t, h.sh.Spool().Close())
				h.sh = h.open(budget, nil)
				dropped = 0
			}

			n, err := h.sh.MoveOnce(ctx)
			require.NoError(t, err)
			if tc.restart {
				assert.Equal(t, len(want), n, "the same entries, read again")
			} else {
				assert.Zero(t, n, "the failed delete is finished; nothing is read again")
			}
			assert.Equal(t, dropped, h.sh.Spool().Dropped(), "nothing more dropped")
			assert.Zero(t, h.rdb.XLen(ctx, jobs.CaptureStream).Val())
			h.drain()
			assert.Zero(t, h.tombstones(), "pruned after the XDEL")

			got := h.rc.Events()
			var gapped int64
			for _, g := range h.rc.Gaps() {
				gapped += g.Count
			}
			for id, e := range want {
				if e.Type != "delta" {
					assert.Contains(t, got, id, "a %s event was dropped", e.Type)
				}
			}
			assert.Equal(t, int64(len(want)), int64(len(got))+gapped, "events stored plus gaps counted = events written")
		})
	}
}

// A refusal's text is capped for the quarantine table without cutting a
// character in two.
func TestQuarantineMessageFromCentralIsValidUTF8(t *testing.T) {
	h := newHarness(t, 64<<20, nil)
	prefix := `{"error":{"code":"invalid_batch","message":"`
	if (daemon.MaxMessage-len(prefix))%2 == 0 {
		prefix += "x" // so that the cap falls inside a 2-byte character
	}
	answer := prefix + strings.Repeat("é", daemon.MaxMessage) + `"}}`
	h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(answer))
		return true
	})
	h.jobs(1, 0, `{}`)
	_, err := h.sh.MoveOnce(context.Background())
	require.NoError(t, err)
	for r := h.sh.SendOnce(context.Background()); r.Action != actQuarantine; r = h.sh.SendOnce(context.Background()) {
		require.Equal(t, actSplit, r.Action) // down to one event alone
	}

	db, err := sql.Open("sqlite", sqldb.SQLiteDSN(h.path))
	require.NoError(t, err)
	defer db.Close()
	var msg string
	require.NoError(t, db.QueryRow(`SELECT message FROM quarantine`).Scan(&msg))
	assert.True(t, utf8.ValidString(msg), "a character was cut in two")
	assert.Equal(t, daemon.MaxMessage-1, len(msg))
	assert.True(t, strings.HasPrefix(answer, msg))
}

// Tombstones a crash between the XDEL and Moved left behind go with the
// first move that reads the whole capture stream, whatever the clock says
// (from the file at the next move's Add, or at once when the mover finds
// the stream empty); a move that reads only the stream's head keeps them.
func TestLeftTombstonesGoWithADrainingMove(t *testing.T) {
	for _, tc := range []struct {
		name   string
		deltas int
		last   int // entries the draining move reads
	}{{"short read", 2, 1}, {"empty read", 1, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			const budget = 6_000
			h := newHarness(t, budget, nil)
			ctx := context.Background()
			h.jobs(2, 8, `{"text":"`+strings.Repeat("y", 900)+`"}`)
			msgs, err := h.rdb.XRange(ctx, jobs.CaptureStream, "-", "+").Result()
			require.NoError(t, err)
			caps := make([]jobs.Captured, len(msgs))
			ids := make([]string, len(msgs))
			for i, m := range msgs {
				caps[i], ids[i] = jobs.CapturedFromValues(m.ID, m.Values), m.ID
			}
			res, err := h.sh.Spool().Add(ctx, caps)
			require.NoError(t, err)
			require.Greater(t, res.Dropped, 0)
			require.NoError(t, h.rdb.XDel(ctx, jobs.CaptureStream, ids...).Err())
			left := h.tombstones()
			require.Greater(t, left, int64(0))
			require.NoError(t, h.sh.Spool().Close()) // killed before Moved
			h.sh = h.open(budget, func(c *Config) { c.MoveBatch = 2 })

			h.jobs(1, tc.deltas, `{}`) // queued, running, the deltas, done
			for range 2 {
				n, err := h.sh.MoveOnce(ctx)
				require.NoError(t, err)
				require.Equal(t, 2, n)
				assert.Equal(t, left+2, h.tombstones(), "the stream's head only (and this move's own)")
			}
			n, err := h.sh.MoveOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, tc.last, n)
			if n > 0 { // the mover goes idle
				n, err = h.sh.MoveOnce(ctx)
				require.NoError(t, err)
				require.Zero(t, n)
			}
			assert.Zero(t, h.tombstones())
		})
	}
}

// An edge id central refuses in every batch and heartbeat is refused at
// construction, without echoing it.
func TestNewRefusesAnEdgeIDCentralRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   string
		ok   bool
	}{
		{"empty", "", false},
		{"too long", strings.Repeat("e", 129), false},
		{"longest", strings.Repeat("e", 128), true},
		{"space", "jetson 1", false},
		{"slash", "jetson/1", false},
		{"newline", "jetson-1\n", false},
		{"non-ascii", "jétson", false},
		{"every allowed character", "Jetson_9.lab:01-a", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp, err := spool.Open(context.Background(), filepath.Join(t.TempDir(), spool.File), 1<<20)
			require.NoError(t, err)
			defer sp.Close()
			_, err = New(nil, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), sp,
				Config{URL: "http://central.invalid", EdgeID: tc.id, Secret: []byte(testSecret)})
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			if tc.id != "" {
				assert.ErrorIs(t, err, wire.ErrEdgeID)
				assert.NotContains(t, err.Error(), tc.id)
			}
		})
	}
}

// When the XDEL of a move fails, the sender may ship (and the spool
// delete) what the move spooled before the mover tries again. Reading the
// same entries again would spool them a second time: shipped twice, and,
// when the budget then drops them, counted in a gap of events central
// has. The mover finishes the failed delete before it reads anything.
func TestFailedXDelDoesNotSpoolShippedEventsAgain(t *testing.T) {
	const budget = 6_000
	h := newHarness(t, budget, nil)
	ids := h.jobs(2, 8, `{"text":"`+strings.Repeat("y", 900)+`"}`)
	want := h.written(ids)
	fail := &failXDel{}
	fail.n.Store(1)
	h.rdb.AddHook(fail)
	ctx := context.Background()

	_, err := h.sh.MoveOnce(ctx)
	require.Error(t, err)
	for i := 0; ; i++ { // the sender ships the spool meanwhile
		require.Less(t, i, 100)
		r := h.sh.SendOnce(ctx)
		if r.Idle {
			break
		}
		require.Equal(t, actAccepted, r.Action)
	}
	shipped := h.rc.Arrivals()
	// More events come while the spool is near its budget: a move that
	// spooled the shipped ones again would drop those first.
	more := h.jobs(1, 4, `{"text":"`+strings.Repeat("y", 900)+`"}`)
	for id, e := range h.written(more) {
		want[id] = e
	}

	_, err = h.sh.MoveOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, h.rdb.XLen(ctx, jobs.CaptureStream).Val())
	h.drain()

	seen := map[string]bool{}
	for _, e := range shipped {
		seen[e.EventID] = true
	}
	for _, e := range h.rc.Arrivals()[len(shipped):] {
		assert.False(t, seen[e.EventID], "%s shipped twice", e.EventID)
	}
	got := h.rc.Events()
	var gapped int64
	for _, g := range h.rc.Gaps() {
		gapped += g.Count
	}
	assert.Equal(t, int64(len(want)), int64(len(got))+gapped, "events stored plus gaps counted = events written")
	assert.Equal(t, gapped, h.sh.Spool().Dropped(), "drops counted = gaps reported")
	assert.Zero(t, h.tombstones())
}
