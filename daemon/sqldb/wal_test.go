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
// TRUNCATE checkpoint keeps it near its limit.
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
	var largest int64
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if st, err := os.Stat(path + "-wal"); err == nil && st.Size() > largest {
			largest = st.Size()
		}
	}
	close(stop)
	wg.Wait()
	// The limit, plus what the writers add while a checkpoint waits for
	// them (up to its one-second busy timeout).
	if largest > 16<<20 {
		t.Fatalf("the WAL grew to %d bytes under a 1 MiB limit", largest)
	}
	t.Logf("largest WAL: %d bytes", largest)
}
