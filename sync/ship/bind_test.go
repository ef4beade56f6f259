package ship

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// opening is a NewOpening shipper of edge on the spool at path, logging
// to the harness's log.
func (h *harness) opening(edge, path string) *Shipper {
	h.t.Helper()
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sh, err := NewOpening(log, h.rdb, func(ctx context.Context) (*spool.Spool, error) {
		return spool.Open(ctx, path, 64<<20)
	}, Config{URL: h.rc.URL, EdgeID: edge, Secret: []byte(testSecret), BackoffBase: 10 * time.Millisecond,
		BackoffMax: 50 * time.Millisecond, Poll: 10 * time.Millisecond})
	require.NoError(h.t, err)
	return sh
}

// run runs sh until the test ends.
func (h *harness) run(sh *Shipper) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sh.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		assert.NoError(h.t, <-done)
	})
}

// writtenAs is every event the scripts wrote for ids, as central should
// get it from edge.
func (h *harness) writtenAs(edge string, ids []string) map[string]wire.Event {
	out := map[string]wire.Event{}
	for _, e := range h.written(ids) {
		w := wire.NewEvent(edge, e.JobID, e.EntryID, e.Type, e.Step, e.TS, e.Data)
		w.Task = e.Task
		out[w.EventID] = w
	}
	return out
}

// spoolUnder leaves at path a spool of jobs (and a gap) captured by an
// edge running as edge, none of it shipped, as a restart finds it. It
// returns the jobs.
func (h *harness) spoolUnder(edge, path string) []string {
	h.t.Helper()
	ctx := context.Background()
	sh := h.opening(edge, path)
	require.True(h.t, sh.openSpool(ctx))
	ids := h.jobs(3, 2, `{"text":"before"}`)
	for {
		n, err := sh.MoveOnce(ctx)
		require.NoError(h.t, err)
		if n == 0 {
			break
		}
	}
	_, err := sh.Spool().AddGaps(ctx, []spool.Gap{{JobID: ids[0], Type: "delta", Count: 4, FirstEntry: "1-0", LastEntry: "1-3", FirstTS: 1, LastTS: 2}})
	require.NoError(h.t, err)
	require.NoError(h.t, sh.Spool().Close())
	return ids
}

// A spool is shipped under the edge id its events were captured under,
// never under another. Restarted with the same id, the edge ships its
// backlog; a spool an edge without the id file wrote is taken as the
// configured id's. Restarted with another id (the edge re-registered with
// sync.db kept, or a state directory copied onto another device), the old
// spool is set aside with its id beside it, kept for the operator, logged
// once at error level with both ids and the file names, and not shipped:
// central gets only what the edge captures under its new id.
func TestSpoolIsShippedOnlyUnderTheEdgeIDItWasCapturedUnder(t *testing.T) {
	const before, after = "jetson-1", "jetson-2"
	for _, tc := range []struct {
		name     string
		edge     string // the id of the second start
		removeID bool   // the id file is gone, as an edge without it left the spool
		writeID  string // the id file holds this instead
		was      string // the id the old spool is set aside under
		link     bool   // sync.db is a link onto another card
		ships    bool   // the old backlog is shipped, under edge
	}{
		{name: "same id", edge: before, ships: true},
		{name: "no id file (an older edge's spool)", edge: after, removeID: true, ships: true},
		{name: "another id", edge: after, was: before},
		{name: "another id, sync.db a link onto a card", edge: after, was: before, link: true},
		{name: "id file that names no edge", edge: before, writeID: "\n", was: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 64<<20, nil)
			state, dir := t.TempDir(), ""
			path := filepath.Join(state, spool.File)
			if dir = state; tc.link {
				dir = t.TempDir()
				require.NoError(t, os.Symlink(filepath.Join(dir, spool.File), path))
			}
			idPath := filepath.Join(state, EdgeIDFile)
			old := h.spoolUnder(before, path)
			got, err := os.ReadFile(idPath)
			require.NoError(t, err)
			require.Equal(t, before+"\n", string(got), "bound at the first start")
			if tc.removeID {
				require.NoError(t, os.Remove(idPath))
			}
			if tc.writeID != "" {
				require.NoError(t, os.WriteFile(idPath, []byte(tc.writeID), 0o600))
			}

			h.run(h.opening(tc.edge, path))
			fresh := h.jobs(2, 1, `{"text":"after"}`)
			want := h.writtenAs(tc.edge, fresh)
			if tc.ships {
				for id, e := range h.writtenAs(tc.edge, old) {
					want[id] = e
				}
			}
			require.Eventually(t, func() bool { return h.rc.Count() >= len(want) }, 10*time.Second, 10*time.Millisecond, "%s", h.logs)
			time.Sleep(100 * time.Millisecond) // anything more would have come by now
			assert.Equal(t, want, h.rc.Events())
			got, err = os.ReadFile(idPath)
			require.NoError(t, err)
			assert.Equal(t, tc.edge+"\n", string(got))

			asides, err := filepath.Glob(filepath.Join(dir, spool.File+".edge-changed-*[0-9]"))
			require.NoError(t, err)
			logged := strings.Count(h.logs.String(), `level=ERROR msg="sync: the spool holds events captured under another edge id`)
			if tc.ships {
				assert.Len(t, h.rc.Gaps(), 1)
				for _, g := range h.rc.Gaps() {
					assert.Equal(t, wire.GapID(tc.edge, old[0], "1-0"), g.GapID)
				}
				assert.Empty(t, asides)
				assert.Zero(t, logged, "%s", h.logs)
				return
			}
			assert.Empty(t, h.rc.Gaps(), "the old spool's gap is not reported either")
			require.Len(t, asides, 1, "set aside next to the spool's file")
			assert.Equal(t, 1, logged, "%s", h.logs)
			for _, s := range []string{"edge_id=" + tc.edge, "spool_edge_id=" + tc.was,
				"edge_id_file=" + idPath, "set_aside=" + asides[0], "not shipped"} {
				assert.Contains(t, h.logs.String(), s)
			}
			kept, err := os.ReadFile(asides[0] + "." + EdgeIDFile)
			require.NoError(t, err)
			assert.Equal(t, tc.was+"\n", string(kept), "the old id is kept with the old spool")
			sp, err := spool.Open(context.Background(), asides[0], 64<<20)
			require.NoError(t, err)
			defer sp.Close()
			st, err := sp.Stats(context.Background())
			require.NoError(t, err)
			assert.Equal(t, int64(len(h.written(old))), st.Events, "the old backlog is kept for the operator")
			if tc.link {
				fi, err := os.Lstat(path)
				require.NoError(t, err)
				assert.Equal(t, os.ModeSymlink, fi.Mode().Type(), "the link stays")
				assert.FileExists(t, filepath.Join(dir, spool.File), "the fresh spool is on the card")
			}
		})
	}
}

// An id file that cannot be read keeps the spool closed: it is not taken
// for a missing one (that would ship a backlog of another id). The failure
// is logged once and retried with backoff, captured events wait in Redis,
// and once the file can be read shipping starts.
func TestUnreadableEdgeIDFileKeepsTheSpoolClosed(t *testing.T) {
	h := newHarness(t, 64<<20, nil)
	state := t.TempDir()
	idPath := filepath.Join(state, EdgeIDFile)
	require.NoError(t, os.Mkdir(idPath, 0o700)) // read: EISDIR
	sh := h.opening("jetson-1", filepath.Join(state, spool.File))
	h.run(sh)
	want := h.written(h.jobs(2, 1, `{}`))
	require.Eventually(t, func() bool {
		return strings.Contains(h.logs.String(), "cannot open the spool")
	}, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // several attempts
	assert.Nil(t, sh.Spool())
	assert.Zero(t, h.rc.Count())
	assert.Equal(t, int64(len(want)), h.rdb.XLen(context.Background(), jobs.CaptureStream).Val(), "the events wait in Redis")
	assert.Equal(t, 1, strings.Count(h.logs.String(), "cannot open the spool"), "logged once:\n%s", h.logs)
	assert.Contains(t, h.logs.String(), EdgeIDFile)

	require.NoError(t, os.Remove(idPath))
	require.Eventually(t, func() bool { return h.rc.Count() == len(want) }, 10*time.Second, 10*time.Millisecond, "%s", h.logs)
	assert.Equal(t, want, h.rc.Events())
}
