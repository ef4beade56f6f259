//go:build unix

package spool_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// The spool holds job data: its file is the daemon's user's only, and so
// are its WAL and shared-memory files, which hold the same rows until a
// checkpoint. A file left readable by an older edge is made private on
// open.
func TestSpoolFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o022) // a shell's umask, not the unit's
	t.Cleanup(func() { syscall.Umask(old) })
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, path string)
	}{
		{"new spool", func(*testing.T, string) {}},
		{"readable spool of an older edge", func(t *testing.T, path string) {
			sp := open(t, path, 1<<20)
			_, err := sp.Add(context.Background(), deltas("a", 1, 3))
			require.NoError(t, err)
			require.NoError(t, sp.Close())
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Chmod(path+suffix, 0o644); err != nil && !os.IsNotExist(err) {
					require.NoError(t, err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			path := filepath.Join(dir, spool.File)
			tc.prepare(t, path)
			sp := open(t, path, 1<<20)
			_, err := sp.Add(ctx, deltas("b", 1, 3))
			require.NoError(t, err)
			names, err := filepath.Glob(path + "*")
			require.NoError(t, err)
			require.Contains(t, names, path+"-wal")
			for _, name := range names {
				fi, err := os.Stat(name)
				require.NoError(t, err)
				assert.Zero(t, fi.Mode().Perm()&0o077, "%s is %v", filepath.Base(name), fi.Mode().Perm())
			}
		})
	}
}
