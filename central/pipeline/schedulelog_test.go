package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// The scheduler is a producer like the API: a message its job type refuses
// (the type's Validate, or a type not registered) is not enqueued, and the
// refusal is logged with the alert and the §8 tracing fields, like any
// refused submit.
func TestSchedulerRefusalLikeSubmit(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock(time.Date(2026, 3, 10, 3, 0, 0, 0, time.UTC))
		f := newFixture(t, db, clk.Now)
		if err := f.types.Register(JobType{Name: "edge_like", Runner: Pipeline{stage("storage", "x", nil, nil)},
			Validate: func(m JobMessage) error {
				if strings.ContainsRune(m.Symbol, ' ') {
					return errors.New("symbol must be an edge id")
				}
				return nil
			}}); err != nil {
			t.Fatal(err)
		}
		s := &Scheduler{Store: f.store, At: 2 * time.Hour, Now: clk.Now, CatchupDays: 1, Log: f.store.Log, Entries: []ScheduleEntry{
			{JobType: "edge_like", Symbols: FixedSymbols([]string{"edge a", "edge-b"})},
			{JobType: "unregistered", Symbols: FixedSymbols([]string{"X"})},
		}}
		if _, err := s.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		p, err := f.store.List(ctx, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Jobs) != 1 || p.Jobs[0].Symbol != "edge-b" {
			t.Fatalf("jobs %+v, want only edge-b's", p.Jobs)
		}
		var refused int
		for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["error_code"] != CodeInvalidMessage {
				continue
			}
			refused++
			for _, k := range []string{"job_id", "idempotency_key", "symbol", "asof"} {
				if v, _ := rec[k].(string); v == "" {
					t.Errorf("log line lacks %s: %s", k, line)
				}
			}
			if rec["alert"] != true {
				t.Errorf("refusal without alert: %s", line)
			}
		}
		if refused != 2 {
			t.Fatalf("want 2 refusals logged, got %d:\n%s", refused, f.logs.String())
		}
	})
}
