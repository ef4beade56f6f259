package sqldb

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Writers in two handles (two processes, as central's pods are) commit
// without pause while readers keep a snapshot open at every moment: passive
// checkpoints then never find the WAL wholly copied and unread, so the WAL
// is never started over and grew without bound. The loop's TRUNCATE
// checkpoint waits for the readers of old snapshots to finish and brings it
// back to nothing, again and again.
func TestCheckpointLoopBoundsTheWAL(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "wal.db")
	var dbs []*DB
	for i := 0; i < 2; i++ {
		db, err := openSQLite(ctx, sqliteOptions{path: path, synchronous: "NORMAL"})
		if err != nil {
			t.Fatal(err)
		}
		db.stopCheckpoints()
		db.stopCheckpoints = db.checkpointLoop(20*time.Millisecond, 256) // 1 MiB
		t.Cleanup(func() { _ = db.Close() })
		dbs = append(dbs, db)
	}
	if _, err := dbs[0].Exec(`CREATE TABLE blob (id INTEGER PRIMARY KEY, b BLOB)`); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	for _, db := range dbs {
		wg.Add(2)
		go func() { // a writer
			defer wg.Done()
			for i := 0; !stopped(); i++ {
				_, _ = db.Exec(`INSERT OR REPLACE INTO blob (id, b) VALUES (?, randomblob(8192))`, i%500)
			}
		}()
		go func() { // readers in relay: the next snapshot opens before the last closes
			defer wg.Done()
			var held *snapshot
			for !stopped() {
				next := openSnapshot(ctx, db)
				held.close(t)
				held = next
				time.Sleep(5 * time.Millisecond)
			}
			held.close(t)
		}()
	}
	// A WAL file never shrinks by itself (passive checkpoints and writers
	// starting it over reuse it at its largest size, and no
	// journal_size_limit is set), so every time it is seen smaller than
	// before, a TRUNCATE checkpoint ran. Each waits for the writers and the
	// readers of old snapshots, so how often one lands depends on the
	// machine: the test waits for three, for up to 30 s.
	const want = 3
	var largest, last int64
	shrinks := 0
	for end := time.Now().Add(30 * time.Second); shrinks < want && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		size := int64(0)
		if st, err := os.Stat(path + "-wal"); err == nil {
			size = st.Size()
		}
		if size < last {
			shrinks++
		}
		largest, last = max(largest, size), size
	}
	close(stop)
	wg.Wait()
	if shrinks < want {
		t.Fatalf("the WAL shrank %d times in 30 s (largest %d bytes): it is not being truncated", shrinks, largest)
	}
	t.Logf("largest WAL: %d bytes; truncated %d times", largest, shrinks)
}

// snapshot is a read transaction that has read, so it holds a snapshot.
// It is begun by hand: the handle's transactions begin IMMEDIATE, as a
// writer's.
type snapshot struct{ conn *sql.Conn }

func openSnapshot(ctx context.Context, db *DB) *snapshot {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil
	}
	if _, err := conn.ExecContext(ctx, `BEGIN DEFERRED`); err != nil {
		_ = conn.Close()
		return nil
	}
	var n int
	_ = conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM blob`).Scan(&n)
	return &snapshot{conn: conn}
}

// close ends the snapshot; a failed ROLLBACK would hand a connection still
// reading back to the pool and hold every checkpoint up, so it fails the test.
func (s *snapshot) close(t *testing.T) {
	if s != nil {
		if _, err := s.conn.ExecContext(context.Background(), `ROLLBACK`); err != nil {
			t.Errorf("end of a read snapshot: %v", err)
		}
		_ = s.conn.Close()
	}
}

// With synchronous=NORMAL a commit is durable once the WAL is synced, which
// SQLite does only in a checkpoint that copies frames. A reader's snapshot
// keeps the passive checkpoint from copying the frames committed after it,
// so those commits stayed unsynced for as long as the reader stayed, not the
// documented quarter second. The loop must sync them within a tick or two,
// and sync nothing while nothing is committed.
func TestCheckpointLoopSyncsTheWALPastReaders(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sync.db")
	db, err := openSQLite(ctx, sqliteOptions{path: path, synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var syncs atomic.Int64
	db.stopCheckpoints()
	db.syncWAL = func(p string) error {
		if p != path+"-wal" {
			t.Errorf("synced %s, want the WAL", p)
		}
		syncs.Add(1)
		return syncExisting(p)
	}
	const period = 20 * time.Millisecond
	// A file's time moves in steps of a kernel tick here, not FAT's two
	// seconds: the loop may stop syncing sooner after the last commit.
	db.walQuiet = 50 * time.Millisecond
	db.stopCheckpoints = db.checkpointLoop(period, walTruncateFrames)
	if _, err := db.Exec(`CREATE TABLE blob (id INTEGER PRIMARY KEY, b BLOB)`); err != nil {
		t.Fatal(err)
	}
	settled := func() int64 { // the count once nothing is left to sync
		t.Helper()
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
			n := syncs.Load()
			time.Sleep(5 * period)
			if syncs.Load() == n {
				return n
			}
		}
		t.Fatal("the WAL is synced on every tick with nothing committed")
		return 0
	}
	settled()
	reader := openSnapshot(ctx, db)
	if reader == nil {
		t.Fatal("no read snapshot")
	}
	defer reader.close(t)
	base := settled()
	for i := range 3 {
		if _, err := db.Exec(`INSERT INTO blob (id, b) VALUES (?, randomblob(8192))`, i); err != nil {
			t.Fatal(err)
		}
	}
	var busy, logFrames, copied int64
	if err := db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &logFrames, &copied); err != nil {
		t.Fatal(err)
	}
	if copied >= logFrames {
		t.Fatalf("the checkpoint copied %d of %d frames past the reader: the test needs it held back", copied, logFrames)
	}
	deadline := time.Now().Add(2 * time.Second)
	for syncs.Load() == base && time.Now().Before(deadline) {
		time.Sleep(period / 4)
	}
	if syncs.Load() == base {
		t.Fatal("commits made behind a reader's snapshot were never synced")
	}
	before := settled()
	time.Sleep(10 * period)
	if n := syncs.Load(); n != before {
		t.Fatalf("an idle database was synced %d times in 10 ticks", n-before)
	}
}

// syncExisting must not create the WAL it syncs when there is none.
func TestSyncExistingCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name   string
		create bool
	}{{"present", true}, {"absent", false}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+"-wal")
			if tc.create {
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := syncExisting(p); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(p); (err == nil) != tc.create {
				t.Fatalf("after the sync the file exists: %v, want %v", err == nil, tc.create)
			}
		})
	}
}

// The loop skips a sync only when the WAL looks as it did before the last
// one and its last write was old enough then that any later write would
// have moved its time: a write within the same step of the file's clock
// leaves size and time alone when it overwrites frames of a restarted WAL.
func TestWALMarkCovers(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x-wal")
	write := func(data string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	const quiet = 3 * time.Second
	old := time.Now().Add(-time.Minute).Truncate(time.Second)
	tests := []struct {
		name   string
		then   func() walMark // what the last sync saw
		change func()         // what happens after it
		covers bool
	}{
		{"nothing written since, old", func() walMark { write("aa", old); return readWALMark(p) }, func() {}, true},
		{"nothing written since, too recent to tell", func() walMark {
			write("aa", time.Now())
			return readWALMark(p)
		}, func() {}, false},
		{"grown", func() walMark { write("aa", old); return readWALMark(p) }, func() { write("aaa", old) }, false},
		{"same size, newer", func() walMark { write("aa", old); return readWALMark(p) }, func() { write("bb", old.Add(time.Second)) }, false},
		{"recreated", func() walMark { write("aa", old); return readWALMark(p) }, func() {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			write("aa", old)
		}, false},
		{"removed", func() walMark { write("aa", old); return readWALMark(p) }, func() { _ = os.Remove(p) }, false},
		{"never synced", func() walMark { write("aa", old); return walMark{} }, func() {}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.then()
			// A file kept open so a recreated one gets another inode.
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tc.change()
			if got := m.covers(readWALMark(p), quiet); got != tc.covers {
				t.Fatalf("covers = %v, want %v", got, tc.covers)
			}
		})
	}
}
