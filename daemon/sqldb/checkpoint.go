package sqldb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
// the WAL itself whenever something was committed since its last sync,
// which bounds what a power cut loses to about one period whatever the
// readers do; an idle database is not synced at all (an edge box's SD card
// wears with every write). The returned func stops the loop and waits for it.
func (db *DB) checkpointLoop(period time.Duration, truncateFrames int64) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	syncWAL := db.syncWAL
	if syncWAL == nil {
		syncWAL = syncExisting
	}
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		var synced []byte // WAL-index header at the last sync
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				// The sync comes first, needing no pool connection, so a
				// checkpoint waiting for one does not hold it back. The
				// header is read before the sync: a commit that lands after
				// the read changes it, and the next tick syncs again.
				if hdr := walIndexHeader(db.Path + "-shm"); hdr == nil || !bytes.Equal(hdr, synced) {
					if syncWAL(db.Path+"-wal") == nil {
						synced = hdr
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

// walIndexHeaderSize is the size of the WAL-index header at the start of
// the -shm file (sqlite.org/walformat.html, "The WAL-Index Header").
const walIndexHeaderSize = 48

// walIndexHeader returns the first copy of the WAL-index header, which every
// connection of every process shares through the -shm file: its change
// counter grows with each commit, and its frame count and salts change with
// each frame written or WAL restart, so an unchanged header means nothing was
// committed meanwhile. nil when it cannot be read (the caller then syncs).
func walIndexHeader(shm string) []byte {
	f, err := os.Open(shm)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, walIndexHeaderSize)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil
	}
	return b
}

// syncExisting fsyncs the file at path, which flushes every process's
// writes to it; a file that does not exist (no WAL yet, or removed by the
// last connection to close) has nothing to sync and is not created.
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
