//go:build linux

package sqldb

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// fOFDGetLK is F_OFD_GETLK: an open-file-description lock conflicts with
// the POSIX locks of its own process too, so it sees this process's SQLite
// connections' locks, which F_GETLK never reports to their owner.
const fOFDGetLK = 36

// shmLocked reports whether any process, this one included, holds a lock
// on the -shm file's lock bytes (SQLite's WAL locks and the DMS byte:
// offsets 120 to 128). probe stays open for the test: closing it would
// drop the very locks it looks for.
func shmLocked(t *testing.T, probe *os.File) bool {
	t.Helper()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 120, Len: 9}
	if err := syscall.FcntlFlock(probe.Fd(), fOFDGetLK, &lk); err != nil {
		t.Fatalf("F_OFD_GETLK: %v", err)
	}
	return lk.Type != syscall.F_UNLCK
}

// A process's POSIX locks on a file all go when it closes any descriptor
// of that file. SQLite holds its WAL locks (and the shared DMS lock that
// tells other processes the wal-index is in use) on the -shm file, so the
// checkpoint loop must never open and close it: had it, another process
// could take the write lock beside this one's writer, or rebuild the
// wal-index under its readers.
func TestCheckpointLoopKeepsSQLiteLocks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "locks.db")
	db, err := openSQLite(ctx, sqliteOptions{path: path, synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	var probe *os.File
	t.Cleanup(func() {
		_ = db.Close()
		// Only now: its close drops this process's locks.
		if probe != nil {
			_ = probe.Close()
		}
	})
	db.stopCheckpoints()
	const period = 10 * time.Millisecond
	db.stopCheckpoints = db.checkpointLoop(period, walTruncateFrames)
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if probe, err = os.Open(path + "-shm"); err != nil {
		t.Fatal(err)
	}
	if !shmLocked(t, probe) {
		t.Fatal("no lock on the -shm file with connections open: the probe sees nothing")
	}
	for i := range 20 {
		if _, err := db.Exec(`INSERT INTO t (id) VALUES (?)`, i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * period)
		if !shmLocked(t, probe) {
			t.Fatalf("after %d commits and checkpoint ticks the connections' locks on the -shm file are gone", i+1)
		}
	}
}
