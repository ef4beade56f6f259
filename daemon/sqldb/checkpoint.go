package sqldb

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// walTruncateFrames is the WAL length (64 MiB of 4 KiB pages) past which
// the checkpoint loop follows a passive checkpoint with a TRUNCATE one.
const walTruncateFrames = 16384

// checkpointLoop copies the WAL back into the database file every period
// with a PASSIVE checkpoint on a pool connection. Writers never checkpoint
// themselves (wal_autocheckpoint=0), so the fsyncs a checkpoint needs stay
// off the commit path; a passive checkpoint never blocks a writer.
//
// But a passive checkpoint alone lets the WAL grow without bound under a
// steady write load: SQLite starts the WAL over only when a writer finds it
// wholly checkpointed, and with writers in several processes committing
// every few milliseconds new frames are always appended while the
// checkpoint copies the old ones (the chaos run's WAL reached 1.7 GB at
// 7,500 jobs, every reader's page lookups walking its index). So when a
// passive checkpoint leaves more than truncateFrames in the WAL, the loop
// runs a TRUNCATE checkpoint, which holds new writers back until it has
// copied every frame and the readers have left the WAL, then empties it; its
// connection waits at most a second for that (busy: the next tick tries
// again).
//
// With synchronous=NORMAL a commit is not synced, and SQLite syncs the WAL
// only in a checkpoint that has frames to copy: one held back by a reader's
// snapshot (a long listing, an export, a backup) syncs nothing, and commits
// would stay in the page cache until the readers let a checkpoint through or
// the WAL reached truncateFrames. So on every tick the loop syncs
// the WAL itself whenever something was committed since its last sync
// (the WAL file's size or time changed, or its last write is too recent to
// tell: walQuiet), which bounds what a power cut loses to about one period
// whatever the readers do; an idle database is not synced at all (an edge
// box's SD card wears with every write). The returned func stops the loop
// and waits for it.
func (db *DB) checkpointLoop(period time.Duration, truncateFrames int64) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	syncWAL := db.syncWAL
	if syncWAL == nil {
		syncWAL = syncExisting
	}
	quiet := db.walQuiet
	if quiet == 0 {
		quiet = walQuiet
	}
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		var synced walMark // the WAL as it was read before the last sync
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				// The sync comes first, needing no pool connection, so a
				// checkpoint waiting for one does not hold it back. The
				// WAL is looked at before the sync: a commit that lands
				// after the look changes what the next one sees, and the
				// next tick syncs again.
				seen := readWALMark(db.Path + "-wal")
				if !synced.covers(seen, quiet) {
					if syncWAL(db.Path+"-wal") == nil {
						synced = seen
					}
				}
				var busy, logFrames, copied int64
				err := db.DB.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logFrames, &copied)
				if err == nil && logFrames > truncateFrames {
					_ = db.truncateWAL(ctx, time.Second)
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		// Leave a compact file behind for the next process.
		_, _ = db.DB.ExecContext(context.Background(), "PRAGMA wal_checkpoint(TRUNCATE)")
	}
}

// walQuiet is how long before it was looked at the WAL must have been
// written last for the checkpoint loop to trust that an unchanged look
// means nothing was committed since. A file's modification time moves in
// steps (a kernel tick; two seconds on FAT, an edge box's SD card perhaps):
// a commit in the step of the last write, after the look, could leave the
// file's size and time as they were. Once the last write is older than
// any step, every later one shows; until then the loop syncs on every
// tick, a few seconds after the last commit, then stops.
const walQuiet = 3 * time.Second

// walMark is what the checkpoint loop saw of the WAL file: its identity,
// size and modification time, read with stat. It is not the WAL-index
// header in the -shm file, though that changes with every commit: opening
// and closing that file would drop every POSIX lock this process holds on
// it, which are SQLite's WAL locks (sqlite.org/howtocorrupt.html, 2.2):
// another process could then write beside this one's writer or rebuild the
// wal-index under its readers.
type walMark struct {
	fi   fs.FileInfo // nil: not read (no WAL, or stat failed)
	seen time.Time   // when fi was read, by the wall clock (as fi's time)
}

func readWALMark(path string) walMark {
	now := time.Now()
	fi, err := os.Stat(path)
	if err != nil {
		return walMark{}
	}
	return walMark{fi: fi, seen: now}
}

// covers reports whether a sync after m also covered what now shows:
// the same file, as large and as old, last written at least quiet before
// m was read.
func (m walMark) covers(now walMark, quiet time.Duration) bool {
	if m.fi == nil || now.fi == nil || !os.SameFile(m.fi, now.fi) {
		return false
	}
	return m.fi.Size() == now.fi.Size() && m.fi.ModTime().Equal(now.fi.ModTime()) &&
		m.seen.Sub(m.fi.ModTime()) >= quiet
}

// syncExisting fsyncs the file at path, which flushes every process's
// writes to it; a file that does not exist (no WAL yet, or removed by the
// last connection to close) has nothing to sync and is not created.
// Opening and closing the WAL is safe where the -shm file is not: SQLite
// takes no lock on it.
func syncExisting(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// truncateWAL runs a TRUNCATE checkpoint on a connection of its own whose
// busy timeout is wait, so a checkpoint held up by long readers gives up
// instead of holding the writers back for the pool's 15 s.
func (db *DB) truncateWAL(ctx context.Context, wait time.Duration) error {
	conn, err := db.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", wait.Milliseconds())); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA busy_timeout = 15000") //nolint:errcheck
	var busy, logFrames, copied int64
	return conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &copied)
}
