package executor

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func openDir(t *testing.T, path string) *os.File {
	t.Helper()
	d, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

func TestMovesWithoutRenameNoReplace(t *testing.T) {
	WithoutRenameNoReplace(t)
	type entry func(t *testing.T, path string)
	file := func(content string) entry {
		return func(t *testing.T, path string) { require.NoError(t, os.WriteFile(path, []byte(content), 0o600)) }
	}
	link := func(t *testing.T, path string) { require.NoError(t, os.Symlink("/etc/passwd", path)) }
	dir := func(t *testing.T, path string) { require.NoError(t, os.Mkdir(path, 0o700)) }
	cases := []struct {
		name     string
		move     func(from *os.File, fromName string, to *os.File, toName string) error
		src, dst entry // dst nil: the destination name is free
		wantErr  error
	}{
		{"put back a file", putBack, file("ours"), nil, nil},
		{"put back a symlink, not what it points to", putBack, link, nil, nil},
		{"put back a directory", putBack, dir, nil, nil},
		{"put back over a user's new file", putBack, file("ours"), file("user"), unix.EEXIST},
		{"put back a symlink over a user's new file", putBack, link, file("user"), unix.EEXIST},
		{"put back a directory over a user's new file", putBack, dir, file("user"), unix.ENOTDIR},
		{"move a file", renameNoReplace, file("ours"), nil, nil},
		{"move over an existing entry", renameNoReplace, file("ours"), file("user"), unix.EEXIST},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := t.TempDir(), t.TempDir()
			src, dst := filepath.Join(a, "x"), filepath.Join(b, "x")
			tc.src(t, src)
			if tc.dst != nil {
				tc.dst(t, dst)
			}
			var before, beforeDst unix.Stat_t
			require.NoError(t, unix.Lstat(src, &before))
			_ = unix.Lstat(dst, &beforeDst)

			err := tc.move(openDir(t, a), "x", openDir(t, b), "x")
			var after unix.Stat_t
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.NoError(t, unix.Lstat(src, &after), "the entry must stay where it was")
				require.Equal(t, before.Ino, after.Ino)
				got, err := os.ReadFile(dst)
				require.NoError(t, err)
				require.Equal(t, "user", string(got), "the existing entry must be untouched")
				return
			}
			require.NoError(t, err)
			require.NoError(t, unix.Lstat(dst, &after))
			require.Equal(t, before.Ino, after.Ino, "the same entry must arrive")
			require.Equal(t, before.Mode&unix.S_IFMT, after.Mode&unix.S_IFMT)
			_, err = os.Lstat(src)
			require.ErrorIs(t, err, os.ErrNotExist, "the old name must be gone")
		})
	}
}

// A user creating a new file at the name a swapped-in file is being put
// back to must keep it: one of the two wins, never both.
func TestPutBackRacingUserNeverReplaces(t *testing.T) {
	WithoutRenameNoReplace(t)
	a, b := t.TempDir(), t.TempDir()
	ad, bd := openDir(t, a), openDir(t, b)
	src, dst := filepath.Join(a, "x"), filepath.Join(b, "x")
	for i := 0; i < 2000; i++ {
		require.NoError(t, os.WriteFile(src, []byte("ours"), 0o600))
		var userErr, putErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if userErr = err; err == nil {
				_, userErr = f.WriteString("user")
				f.Close()
			}
		}()
		go func() {
			defer wg.Done()
			putErr = putBack(ad, "x", bd, "x")
		}()
		wg.Wait()
		got, err := os.ReadFile(dst)
		require.NoError(t, err)
		switch {
		case userErr == nil:
			require.Equal(t, "user", string(got), "iteration %d: the user's file was replaced", i)
			require.ErrorIs(t, putErr, unix.EEXIST, "iteration %d", i)
		default:
			require.True(t, errors.Is(userErr, os.ErrExist), "iteration %d: %v", i, userErr)
			require.NoError(t, putErr, "iteration %d", i)
			require.Equal(t, "ours", string(got))
		}
		require.NoError(t, os.Remove(dst))
		_ = os.Remove(src)
	}
}
