package ship

import (
	"bytes"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// damageLive overwrites the root page of the spool's capture-entry index
// in the file at path while the shipper has it open, as a failing card
// would, and makes the shipper's connection read it again: the pages go
// to the main file by a checkpoint first, and a write of another
// connection after the damage tells the shipper's connection its cache is
// stale.
func damageLive(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	var root, size int64
	require.NoError(t, db.QueryRow(`SELECT rootpage FROM sqlite_master WHERE name = 'events_entry'`).Scan(&root))
	require.NoError(t, db.QueryRow(`PRAGMA page_size`).Scan(&size))
	_, err = db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte{0xab}, int(size)), (root-1)*size)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = db.Exec(`INSERT INTO inflight (id, seq) VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET seq = seq`)
	require.NoError(t, err)
}

// A spool that becomes corrupt while the edge runs (a card failing under
// it) fails every statement that meets the damage, the same way at every
// retry: the shipper sets it aside as Open does at start, logs it once at
// error level, and ships what the edge captures next from an empty spool.
func TestSpoolCorruptWhileRunningIsReplaced(t *testing.T) {
	h := newHarness(t, 64<<20, nil)
	state := t.TempDir()
	path := filepath.Join(state, spool.File)
	sh := h.opening("jetson-1", path)
	h.run(sh)
	first := h.written(h.jobs(2, 1, `{"text":"before"}`))
	require.Eventually(t, func() bool { return h.rc.Count() == len(first) }, 10*time.Second, 10*time.Millisecond, "%s", h.logs)

	damageLive(t, path)
	after := h.written(h.jobs(2, 1, `{"text":"after"}`))
	require.Eventually(t, func() bool {
		return strings.Contains(h.logs.String(), "the spool file became corrupt while running")
	}, 10*time.Second, 10*time.Millisecond, "%s", h.logs)
	asides, err := filepath.Glob(path + ".corrupt-*[0-9]")
	require.NoError(t, err)
	require.Len(t, asides, 1, "%s", h.logs)
	assert.Contains(t, h.logs.String(), "set_aside="+asides[0])

	// What the edge captures from now on is shipped from the new spool;
	// so are the entries the damaged one could not take.
	later := h.written(h.jobs(2, 1, `{"text":"later"}`))
	want := map[string]bool{}
	for _, m := range []map[string]wire.Event{first, after, later} {
		for id := range m {
			want[id] = true
		}
	}
	require.Eventually(t, func() bool {
		got := h.rc.Events()
		for id := range later {
			if _, ok := got[id]; !ok {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "%s", h.logs)
	assert.Equal(t, 1, strings.Count(h.logs.String(), "the spool file became corrupt while running"), "%s", h.logs)
	for id := range h.rc.Events() {
		assert.True(t, want[id], "central got an event nobody wrote: %s", id)
	}
}
