package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// thumbTempPrefix starts the name of the file a render writes before
// renaming it into place; os.CreateTemp puts only digits after it.
const thumbTempPrefix = ".tmp-thumb-"

// thumbTempSweepEvery is how often a running executor looks for stale
// temp files: besides the sweep at start, which cannot remove those of a
// crash that happened less than thumbTempAge before it.
const thumbTempSweepEvery = time.Hour

// thumbTempAge is the age past which a temp file belongs to no render: an
// ffmpeg render is killed at the thumbnail timeout, and a render in Go
// takes seconds. Twice the timeout, at least an hour, leaves a wide margin
// for another process rendering into the same directory.
func (x *Executor) thumbTempAge() time.Duration { return max(time.Hour, 2*x.thumbTimeout()) }

func isThumbTemp(name string) bool {
	rest, ok := strings.CutPrefix(name, thumbTempPrefix)
	if !ok || rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < '0' || rest[i] > '9' {
			return false
		}
	}
	return true
}

// RemoveStaleThumbTemps removes the temp files that renders killed
// mid-way (SIGKILL, a power loss) left in the thumbnails directory, and
// returns how many it removed. Only regular files with a single link, named
// exactly as a render names them, directly in the directory and older than
// thumbTempAge go: the directory is opened without following a symlink
// anywhere on its path, and every entry is examined and unlinked relative
// to that descriptor, never through a link. A symlink, a hard link or a
// directory that happens to match is not a render's file and stays.
func (x *Executor) RemoveStaleThumbTemps(ctx context.Context) (int, error) {
	if x.Thumbs == nil {
		return 0, nil
	}
	dir := x.Thumbs.Path()
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags: uint64(flags), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Open(dir, flags, 0)
	}
	if err != nil {
		return 0, fmt.Errorf("thumbnails directory %s: %w", dir, err)
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("thumbnails directory %s: %w", dir, err)
	}
	cutoff := time.Now().Add(-x.thumbTempAge())
	removed := 0
	var errs []error
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		if !isThumbTemp(name) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || !time.Unix(st.Mtim.Unix()).Before(cutoff) {
			continue
		}
		if err := unix.Unlinkat(fd, name, 0); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove %s: %w", name, err))
			}
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// sweepThumbTemps runs RemoveStaleThumbTemps at start and then every
// thumbTempSweepEvery until ctx ends.
func (x *Executor) sweepThumbTemps(ctx context.Context) {
	t := time.NewTicker(thumbTempSweepEvery)
	defer t.Stop()
	for {
		n, err := x.RemoveStaleThumbTemps(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			x.Log.Warn("stale thumbnail temp files", "err", err, "removed", n)
		case n > 0:
			x.Log.Info("stale thumbnail temp files removed", "removed", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
