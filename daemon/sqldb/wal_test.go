package sqldb

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Writers in two handles (two processes, as central's pods are) commit
// without pause while a reader keeps reading: passive checkpoints alone
// never find the WAL wholly copied, so it grew without bound. The loop's
// TRUNCATE checkpoint brings it back to its limit again and again.
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
	var wg sync.WaitGroup
	for _, db := range dbs {
		wg.Add(2)
		go func() { // a writer
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = db.Exec(`INSERT OR REPLACE INTO blob (id, b) VALUES (?, randomblob(8192))`, i%500)
			}
		}()
		go func() { // a reader, always in the WAL
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var n int
				_ = db.QueryRow(`SELECT COUNT(*) FROM blob`).Scan(&n)
			}
		}()
	}
	// A WAL file never shrinks by itself (passive checkpoints and writers
	// starting it over reuse it at its largest size), so every time it is
	// seen back under the limit after growing past it, a TRUNCATE
	// checkpoint ran. How far it grows in between depends on how fast the
	// writers are while a checkpoint waits for them (up to its one-second
	// busy timeout): tens of MiB on a fast machine.
	const limit = 1 << 20
	var largest int64
	resets, above := 0, false
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		size := int64(0)
		if st, err := os.Stat(path + "-wal"); err == nil {
			size = st.Size()
		}
		largest = max(largest, size)
		switch {
		case size > limit:
			above = true
		case above:
			resets++
			above = false
		}
	}
	close(stop)
	wg.Wait()
	if resets < 2 {
		t.Fatalf("the WAL came back under 1 MiB %d times in 3 s (largest %d bytes): it is not being truncated", resets, largest)
	}
	t.Logf("largest WAL: %d bytes; truncated %d times", largest, resets)
}
