package peers

import (
	"context"
	"database/sql"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maragudk/goqite"
	_ "modernc.org/sqlite"
)

// BenchmarkGoqite drains EUTERPE_BENCH_JOBS (default 100,000) messages sent
// beforehand, each received and deleted (goqite's two transactions per
// message) by EUTERPE_PEER_GOQITE_WORKERS goroutines (default 2, like
// central's SQLite burn-down). The database is opened the way goqite's own
// tests open it (one connection) and with Euterpe's pragmas (WAL,
// synchronous=NORMAL, busy_timeout) and the same driver, modernc.org/sqlite.
func BenchmarkGoqite(b *testing.B) {
	jobs := envInt("EUTERPE_BENCH_JOBS", 100000)
	workers := envInt("EUTERPE_PEER_GOQITE_WORKERS", 2)
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		q := url.Values{}
		for _, p := range []string{"busy_timeout(15000)", "journal_mode(WAL)", "synchronous(NORMAL)"} {
			q.Add("_pragma", p)
		}
		db, err := sql.Open("sqlite", "file:"+b.TempDir()+"/goqite.db?"+q.Encode())
		if err != nil {
			b.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		if err := goqite.Setup(ctx, db); err != nil {
			b.Fatal(err)
		}
		queue := goqite.New(goqite.NewOpts{DB: db, Name: "bench", Timeout: time.Minute})
		for n := 0; n < jobs; {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			for k := 0; k < 1000 && n < jobs; k++ {
				if err := queue.SendTx(ctx, tx, goqite.Message{Body: []byte(`{"prompt":"x"}`)}); err != nil {
					b.Fatal(err)
				}
				n++
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := db.Exec("ANALYZE"); err != nil {
			b.Fatal(err)
		}
		var done atomic.Int64
		var wg sync.WaitGroup
		b.StartTimer()
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for {
					m, err := queue.Receive(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					if m == nil {
						return
					}
					if err := queue.Delete(ctx, m.ID); err != nil {
						b.Error(err)
						return
					}
					done.Add(1)
				}
			})
		}
		wg.Wait()
		total += time.Since(start)
		b.StopTimer()
		if n := done.Load(); n != int64(jobs) {
			b.Fatalf("received and deleted %d of %d", n, jobs)
		}
		_ = db.Close()
	}
	report(b, jobs, total)
}
