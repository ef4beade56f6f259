package pipeline

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

func TestScheduleDue(t *testing.T) {
	s := &Scheduler{At: 2 * time.Hour, CatchupDays: 3}
	cases := []struct {
		now  string
		want []string
	}{
		{"2026-03-10T01:59:00Z", []string{"2026-03-08", "2026-03-07", "2026-03-06"}},
		{"2026-03-10T02:00:00Z", []string{"2026-03-09", "2026-03-08", "2026-03-07"}},
		{"2026-03-10T23:00:00Z", []string{"2026-03-09", "2026-03-08", "2026-03-07"}},
	}
	for _, c := range cases {
		now, _ := time.Parse(time.RFC3339, c.now)
		var got []string
		for _, d := range s.Due(now) {
			got = append(got, d.Format(DateLayout))
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v, want %v", c.now, got, c.want)
		}
	}
	if _, err := ParseSchedule("25:00"); err == nil {
		t.Error("25:00 accepted")
	}
	if d, err := ParseSchedule("02:30"); err != nil || d != 150*time.Minute {
		t.Errorf("02:30: %v %v", d, err)
	}
}

// Two pods' schedulers on one database with a fake clock: each key gets
// one job whoever runs first or both at once; a pod down over a slot
// catches up on start, bounded by CatchupDays; a failed scheduled day is
// not re-enqueued.
func TestSchedulerTwoPods(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock(time.Date(2026, 3, 10, 1, 0, 0, 0, time.UTC))
		now := sqldb.Micros(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
		for _, id := range []string{"edge-a", "edge-b"} {
			if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO edges (id, name, secret_encrypted, secret_dek_wrapped, secret_kek_id,
				secret_encryption_version, created_at, updated_at) VALUES (?, ?, ?, ?, 'k', 1, ?, ?)`), id, id, []byte{1}, []byte{1}, now, now); err != nil {
				t.Fatal(err)
			}
		}
		var pods []*Scheduler
		for i := 0; i < 2; i++ {
			h, err := sqldb.Open(ctx, dbURL(t, db), "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Close() })
			f := newFixture(t, h, clk.Now)
			_ = f.types.Register(JobType{Name: "edge_daily", Runner: Pipeline{}})
			_ = f.types.Register(JobType{Name: "prices", Runner: Pipeline{}})
			pods = append(pods, &Scheduler{Store: f.store, At: 2 * time.Hour, Now: clk.Now, CatchupDays: 3, Log: f.store.Log,
				Entries: []ScheduleEntry{{JobType: "edge_daily", Symbols: EdgeSymbols(h)}, {JobType: "prices", Symbols: FixedSymbols([]string{"AAPL"})}}})
		}
		count := func() (jobs, marks int) {
			_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pipeline_jobs").Scan(&jobs)
			_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pipeline_schedule_runs").Scan(&marks)
			return
		}
		runBoth := func() int {
			var wg sync.WaitGroup
			var mu sync.Mutex
			total := 0
			for _, p := range pods {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n, err := p.RunOnce(ctx)
					if err != nil {
						t.Errorf("run: %v", err)
					}
					mu.Lock()
					total += n
					mu.Unlock()
				}()
			}
			wg.Wait()
			return total
		}
		// Started at 01:00 after three days down: catch-up of 3 days
		// (asof 03-06..03-08) × 3 symbols, once, between both pods.
		if n := runBoth(); n != 9 {
			t.Fatalf("catch-up marked %d, want 9", n)
		}
		if j, m := count(); j != 9 || m != 9 {
			t.Fatalf("%d jobs %d marks", j, m)
		}
		if n := runBoth(); n != 0 {
			t.Fatalf("second run marked %d", n)
		}
		// 02:00 passes: yesterday (03-09) is due.
		clk.Add(time.Hour + time.Second)
		if n := runBoth(); n != 3 {
			t.Fatalf("slot marked %d, want 3", n)
		}
		var asofs []string
		rows, _ := db.QueryContext(ctx, "SELECT DISTINCT asof FROM pipeline_jobs ORDER BY asof")
		for rows.Next() {
			var a string
			_ = rows.Scan(&a)
			asofs = append(asofs, a)
		}
		rows.Close()
		if fmt.Sprint(asofs) != "[2026-03-06 2026-03-07 2026-03-08 2026-03-09]" {
			t.Fatalf("asofs %v", asofs)
		}
		// A scheduled job that failed is not enqueued again by the scheduler.
		_, _ = db.ExecContext(ctx, "UPDATE pipeline_jobs SET status = 'failed'")
		clk.Add(time.Hour)
		if n := runBoth(); n != 0 {
			t.Fatalf("re-enqueued %d failed days", n)
		}
	})
}
