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

// A scheduled day whose message is refused for good (INVALID_MESSAGE,
// MESSAGE_TOO_LARGE) is refused once: one alert, counted, and recorded in
// the day's schedule mark, which keeps the next ticks (and the other pods)
// from refusing it again. A refusal that is not final (the type's check
// answered a code of an outage) is retried on the next tick, without an alert.
func TestSchedulerRefusesADayOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock(time.Date(2026, 3, 10, 3, 0, 0, 0, time.UTC))
		f := newFixture(t, db, clk.Now)
		f.store.Metrics = NewMetrics(nil, nil)
		transient := true
		if err := f.types.Register(JobType{Name: "edge_like", Runner: Pipeline{stage("storage", "x", nil, nil)},
			Validate: func(m JobMessage) error {
				switch {
				case strings.ContainsRune(m.Symbol, ' '):
					return errors.New("symbol must be an edge id")
				case m.Symbol == "edge-flaky" && transient:
					return Fail(CodeRepoUnavailable, "lookup timed out")
				}
				return nil
			}}); err != nil {
			t.Fatal(err)
		}
		s := &Scheduler{Store: f.store, At: 2 * time.Hour, Now: clk.Now, CatchupDays: 1, Log: f.store.Log, Entries: []ScheduleEntry{
			{JobType: "edge_like", Symbols: FixedSymbols([]string{"edge a", "edge-b", "edge-flaky"})},
		}}
		for tick := 0; tick < 3; tick++ {
			if _, err := s.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Minute)
		}
		alerts, retries := 0, 0
		for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["alert"] == true {
				alerts++
				if rec["symbol"] != "edge a" || rec["error_code"] != CodeInvalidMessage {
					t.Errorf("alert %s", line)
				}
			}
			if rec["symbol"] == "edge-flaky" && rec["error_code"] == CodeRepoUnavailable {
				retries++
			}
		}
		if alerts != 1 {
			t.Errorf("%d alerts over 3 ticks, want 1:\n%s", alerts, f.logs.String())
		}
		if retries != 3 {
			t.Errorf("transient refusal logged %d times over 3 ticks, want 3 (retried each tick)", retries)
		}
		if n := counterValue(t, f.store.Metrics.ScheduleRefused.WithLabelValues("edge_like", CodeInvalidMessage)); n != 1 {
			t.Errorf("refusals counted %v, want 1", n)
		}
		var jobID, code, msg string
		if err := db.QueryRowContext(ctx, db.Rebind(`SELECT job_id, COALESCE(error_code, ''), COALESCE(error_message, '') FROM pipeline_schedule_runs
			WHERE job_type = ? AND symbol = ? AND asof = ?`), "edge_like", "edge a", "2026-03-09").Scan(&jobID, &code, &msg); err != nil {
			t.Fatalf("refused day has no schedule mark: %v", err)
		}
		if jobID != "" || code != CodeInvalidMessage || !strings.Contains(msg, "edge id") {
			t.Errorf("refused mark: job_id %q error_code %q error_message %q", jobID, code, msg)
		}
		// The check answers again: the day is enqueued on the next tick.
		transient = false
		if n, err := s.RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("after the transient refusal: marked %d, %v; want 1", n, err)
		}
		p, err := f.store.List(ctx, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Jobs) != 2 {
			t.Fatalf("jobs %+v, want edge-b's and edge-flaky's", p.Jobs)
		}
	})
}
