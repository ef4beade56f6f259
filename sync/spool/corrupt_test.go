package spool_test

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// A spool file that is not a database, or whose pages are damaged (an SD
// card after a power cut), must not keep the edge from starting: the file
// is set aside, with its WAL, for an operator, and a fresh spool opens in
// its place.
func TestCorruptSpoolFileIsSetAside(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"not a database", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("not a database ", 300)), 0o600))
		}},
		{"damaged pages", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			for i := 4096; i < len(b); i++ {
				b[i] = 0xab
			}
			require.NoError(t, os.WriteFile(path, b, 0o600))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			path := filepath.Join(dir, spool.File)
			sp, err := spool.Open(ctx, path, 1<<20)
			require.NoError(t, err)
			_, err = sp.Add(ctx, []jobs.Captured{ev("j1", 1, "queued", `{}`), ev("j1", 2, "done", `{}`)})
			require.NoError(t, err)
			require.NoError(t, sp.Close())
			tc.damage(t, path)
			damaged, err := os.ReadFile(path)
			require.NoError(t, err)

			sp, err = spool.Open(ctx, path, 1<<20)
			require.NoError(t, err, "a corrupt spool file stops the edge")
			t.Cleanup(func() { _ = sp.Close() })
			aside := sp.SetAside()
			require.NotEmpty(t, aside)
			assert.Equal(t, dir, filepath.Dir(aside))
			kept, err := os.ReadFile(aside)
			require.NoError(t, err)
			// Kept for an operator (SQLite may have touched its header).
			assert.Len(t, kept, len(damaged), "the damaged file is not kept")

			_, err = sp.Add(ctx, []jobs.Captured{ev("j2", 3, "queued", `{}`)})
			require.NoError(t, err)
			p, err := sp.Next(ctx, 10, 10, 1<<20)
			require.NoError(t, err)
			assert.Equal(t, []string{"j2/queued/1700000000003-0"}, entries(p.Rows))

			// A sound file is never set aside.
			require.NoError(t, sp.Close())
			sp, err = spool.Open(ctx, path, 1<<20)
			require.NoError(t, err)
			assert.Empty(t, sp.SetAside())
		})
	}
}

// damagePage overwrites the root page of the table or index name in the
// closed spool file at path, as a card that lost a write would leave it.
func damagePage(t *testing.T, path, name string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	var root, size int64
	require.NoError(t, db.QueryRow(`SELECT rootpage FROM sqlite_master WHERE name = ?`, name).Scan(&root))
	require.NoError(t, db.QueryRow(`PRAGMA page_size`).Scan(&size))
	require.NoError(t, db.Close())
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(bytes.Repeat([]byte{0xab}, int(size)), (root-1)*size)
	require.NoError(t, err)
}

// Damage in pages the open itself does not read — an index, the gaps
// table — fails every Add or Next that meets it, at every start. Open
// checks the whole file and sets a damaged one aside, so the spool takes
// and ships events again.
func TestDamageOnlyALaterStatementMeetsIsFoundAtOpen(t *testing.T) {
	for _, victim := range []string{"events_entry", "events_delta", "gaps", "tombstones"} {
		t.Run(victim, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), spool.File)
			sp, err := spool.Open(ctx, path, 1<<20)
			require.NoError(t, err)
			_, err = sp.Add(ctx, []jobs.Captured{ev("j1", 1, "queued", `{}`), ev("j1", 2, "delta", `{}`)})
			require.NoError(t, err)
			_, err = sp.AddGaps(ctx, []spool.Gap{{JobID: "j1", Type: "delta", Count: 2, FirstEntry: "1-0", LastEntry: "2-0", FirstTS: 1, LastTS: 2}})
			require.NoError(t, err)
			require.NoError(t, sp.Close())
			damagePage(t, path, victim)

			sp, err = spool.Open(ctx, path, 1<<20)
			require.NoError(t, err)
			t.Cleanup(func() { _ = sp.Close() })
			p, err := sp.Next(ctx, 10, 10, 1<<20)
			require.NoError(t, err)
			assert.NotEmpty(t, sp.SetAside(), "damage left in place")
			assert.Empty(t, p.Rows)
			_, err = sp.Add(ctx, []jobs.Captured{ev("j2", 3, "queued", `{}`)})
			require.NoError(t, err)
			require.NoError(t, sp.Close())
			sp, err = spool.Open(ctx, path, 1<<20)
			require.NoError(t, err)
			assert.Empty(t, sp.SetAside(), "the spool that replaced it is sound")
		})
	}
}
