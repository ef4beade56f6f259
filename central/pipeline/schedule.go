package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// ScheduleEntry is one job type the scheduler enqueues daily, with the
// symbols of a day (a fixed list, or every registered edge).
type ScheduleEntry struct {
	JobType string
	Symbols func(ctx context.Context, asof time.Time) ([]string, error)
}

// FixedSymbols is a ScheduleEntry symbol source of a configured list.
func FixedSymbols(syms []string) func(context.Context, time.Time) ([]string, error) {
	return func(context.Context, time.Time) ([]string, error) { return syms, nil }
}

// Scheduler enqueues asof = yesterday for every entry once the daily slot
// (At after midnight UTC) has passed, and on start catches up the slots of
// the last CatchupDays days it missed. Every (type, symbol, asof) it
// enqueues is marked in pipeline_schedule_runs in the same transaction as
// the submit, so pods scheduling at once, or again after a restart,
// enqueue each day once — and a day whose job failed is not re-enqueued
// behind the operator's back (redrive or submit it by hand).
type Scheduler struct {
	Store       *Store
	At          time.Duration // offset of the slot into the UTC day
	CatchupDays int
	Entries     []ScheduleEntry
	// Tick is the longest sleep between checks (new edges are picked up
	// within it); default a minute.
	Tick time.Duration
	// Backoff spaces the tries after a run that failed (the queue
	// unavailable: §3.3 has a producer retry with exponential back-off),
	// each wait at most Tick; zero: from 1 s up to Tick.
	Backoff lease.Backoff
	Log     *slog.Logger
	// Now is the clock the days owed and the slots are judged by; nil is
	// the database's (Store.Now), the one clock of the lease protocol, so
	// a pod whose own clock is off by hours owes the same days, at the same
	// time, as every other pod.
	Now func() time.Time
}

// now is the scheduler's time: Now, or the database's.
func (s *Scheduler) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return s.Store.Now()
}

// ParseSchedule reads "HH:MM" (UTC).
func ParseSchedule(v string) (time.Duration, error) {
	t, err := time.Parse("15:04", v)
	if err != nil {
		return 0, fmt.Errorf("want HH:MM (UTC), e.g. 02:00")
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, nil
}

// Due lists the asof days the scheduler owes at now: for each of the last
// CatchupDays slots that have passed (newest first), the day before it.
func (s *Scheduler) Due(now time.Time) []time.Time {
	now = now.UTC()
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	slotDay := today
	if now.Before(today.Add(s.At)) {
		slotDay = today.AddDate(0, 0, -1)
	}
	n := max(s.CatchupDays, 1)
	out := make([]time.Time, 0, n)
	for k := 0; k < n; k++ {
		out = append(out, slotDay.AddDate(0, 0, -k-1))
	}
	return out
}

// RunOnce enqueues what is due and not yet scheduled; it returns how many
// jobs it marked.
func (s *Scheduler) RunOnce(ctx context.Context) (int, error) {
	due := s.Due(s.now())
	done, err := s.marks(ctx, due[len(due)-1].Format(DateLayout))
	if err != nil {
		return 0, err
	}
	marked := 0
	for _, day := range due {
		asof := day.Format(DateLayout)
		for _, e := range s.Entries {
			syms, err := e.Symbols(ctx, day)
			if err != nil {
				return marked, unavailable(CodeQueueUnavailable, err)
			}
			for _, sym := range syms {
				if done[e.JobType+"\x00"+sym+"\x00"+asof] {
					continue
				}
				ok, err := s.schedule(ctx, e.JobType, sym, asof)
				if err != nil {
					return marked, err
				}
				if ok {
					marked++
				}
			}
		}
	}
	return marked, nil
}

// marks reads the schedule marks of the days from oldest on. A read cut
// off halfway (a connection lost, ctx ended) fails whole: taken for fewer
// marks, it would send every day it missed through a submit transaction
// on a database that is failing.
func (s *Scheduler) marks(ctx context.Context, oldest string) (map[string]bool, error) {
	rows, err := s.Store.DB.QueryContext(ctx, s.Store.DB.Rebind("SELECT job_type, symbol, asof FROM pipeline_schedule_runs WHERE asof >= ?"), oldest)
	if err != nil {
		return nil, unavailable(CodeQueueUnavailable, fmt.Errorf("pipeline scheduler: read the schedule marks: %w", err))
	}
	defer rows.Close()
	done := map[string]bool{}
	for rows.Next() {
		var t, sym, a string
		if err := rows.Scan(&t, &sym, &a); err != nil {
			return nil, unavailable(CodeQueueUnavailable, fmt.Errorf("pipeline scheduler: read the schedule marks: %w", err))
		}
		done[t+"\x00"+sym+"\x00"+a] = true
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(CodeQueueUnavailable, fmt.Errorf("pipeline scheduler: read the schedule marks: %w", err))
	}
	return done, nil
}

func (s *Scheduler) schedule(ctx context.Context, jobType, sym, asof string) (bool, error) {
	st := s.Store
	m := st.Message(Request{JobType: jobType, Symbol: sym, Asof: asof, RequestedBy: "scheduler"})
	if err := st.checkSubmit(m); err != nil {
		if code := ErrorCode(err); code != CodeInvalidMessage && code != CodeMessageTooLarge {
			// Not a verdict on the message: the next tick asks again.
			jobLog(s.Log, m, "", err).Warn("pipeline scheduler: cannot check a message; will retry", alertAttr(err)...)
			return false, nil
		}
		return false, s.refuse(ctx, m, err)
	}
	var out Created
	marked := false
	now := st.now() // before the transaction holds a connection (see Store.Claim)
	err := st.DB.Tx(ctx, func(tx *sql.Tx) error {
		marked = false
		res, err := st.DB.ExecTx(ctx, tx, `INSERT INTO pipeline_schedule_runs (job_type, symbol, asof, job_id, scheduled_at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (job_type, symbol, asof) DO NOTHING`, jobType, sym, asof, m.JobID, sqldb.Micros(now))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // another pod scheduled it
		}
		marked = true
		out, err = st.submitTx(ctx, tx, m, now)
		if err == nil && out.JobID != m.JobID {
			_, err = st.DB.ExecTx(ctx, tx, "UPDATE pipeline_schedule_runs SET job_id = ? WHERE job_type = ? AND symbol = ? AND asof = ?", out.JobID, jobType, sym, asof)
		}
		return err
	})
	if err != nil {
		err = unavailable(CodeQueueUnavailable, fmt.Errorf("pipeline scheduler: %w", err))
		// The message has its job id: the line names the job (§8), as the
		// API's retries of a submit do.
		jobLog(s.Log, m, "", nil).Warn("pipeline scheduler: enqueue failed; retrying with back-off", unavailableAttrs(err)...)
		return false, err
	}
	if marked {
		st.submitted(m, out)
	}
	return marked, nil
}

// refuse records the final refusal err of m's day in its schedule mark
// (an empty job_id, the code and message), so the day is refused — alerted and
// counted — once, by one pod, like a systemd timer whose unit failed: not
// triggered again before its next slot. The same message would be refused
// again; the operator fixes the cause and submits the day by hand.
func (s *Scheduler) refuse(ctx context.Context, m JobMessage, err error) error {
	st := s.Store
	code := ErrorCode(err)
	msg := Redact(err.Error())
	res, xerr := st.DB.ExecContext(ctx, st.DB.Rebind(`INSERT INTO pipeline_schedule_runs (job_type, symbol, asof, job_id, scheduled_at, error_code, error_message)
		VALUES (?, ?, ?, '', ?, ?, ?) ON CONFLICT (job_type, symbol, asof) DO NOTHING`),
		m.JobType, m.Symbol, m.Asof, sqldb.Micros(st.now()), code, msg)
	if xerr != nil {
		return unavailable(CodeQueueUnavailable, fmt.Errorf("pipeline scheduler: record a refusal: %w", xerr))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil // another pod refused (or scheduled) it
	}
	st.Metrics.scheduleRefused(m.JobType, code)
	jobLog(s.Log, m, "", err).Error("pipeline scheduler: refusing a message; the day is not scheduled again", "alert", true)
	return nil
}

// Run schedules until ctx is done: at start (the catch-up), at every slot,
// and at least every Tick.
func (s *Scheduler) Run(ctx context.Context) error {
	tick := s.Tick
	if tick <= 0 {
		tick = time.Minute
	}
	backoff := s.Backoff
	if backoff.Base <= 0 {
		backoff.Base = time.Second
	}
	if backoff.Cap <= 0 || backoff.Cap > tick {
		backoff.Cap = tick
	}
	failures := 0
	for {
		n, err := s.RunOnce(ctx)
		now := s.now().UTC()
		next := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).Add(s.At)
		if !next.After(now) {
			next = next.AddDate(0, 0, 1)
		}
		wait := min(next.Sub(now)+time.Second, tick)
		switch {
		case err != nil && ctx.Err() == nil:
			failures++
			wait = min(wait, backoff.Delay(failures))
			s.Log.Warn("pipeline scheduler: will retry", append(unavailableAttrs(err), "failures", failures, "retry_in", wait.String())...)
		case err == nil:
			failures = 0
			if n > 0 {
				s.Log.Info("pipeline scheduler: enqueued the daily jobs", "jobs", n)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// EdgeSymbols lists the edges registered by the end of the day (and not
// disabled): edge_daily's symbols.
func EdgeSymbols(db *sqldb.DB) func(ctx context.Context, asof time.Time) ([]string, error) {
	return func(ctx context.Context, asof time.Time) ([]string, error) {
		rows, err := db.QueryContext(ctx, db.Rebind("SELECT id FROM edges WHERE disabled_at IS NULL AND created_at < ? ORDER BY id"),
			sqldb.Micros(asof.AddDate(0, 0, 1)))
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return nil, err
			}
			out = append(out, id)
		}
		return out, rows.Err()
	}
}

// ParseSymbols reads EUTERPE_PIPELINE_SYMBOLS: type=SYM|SYM,type2=SYM.
func ParseSymbols(v string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, list, ok := strings.Cut(part, "=")
		if !ok || !jobTypeRe.MatchString(name) {
			return nil, fmt.Errorf("entry %q: want type=SYMBOL|SYMBOL", part)
		}
		for _, sym := range strings.Split(list, "|") {
			if sym = strings.TrimSpace(sym); sym != "" {
				out[name] = append(out[name], sym)
			}
		}
		if len(out[name]) == 0 {
			return nil, fmt.Errorf("entry %q: no symbols", part)
		}
	}
	return out, nil
}

// unavailableAttrs are the log attributes of a failed run: the contract
// code and /ready reason of an unreachable database, and the redacted
// error.
func unavailableAttrs(err error) []any {
	var ue *UnavailableError
	if errors.As(err, &ue) {
		return []any{"error_code", ue.Code, "reason", ue.Reason, "err", Redact(err.Error())}
	}
	return []any{"err", Redact(err.Error())}
}
