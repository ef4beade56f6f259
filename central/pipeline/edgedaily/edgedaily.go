package edgedaily

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/pipeline/objstore"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Name is the job type's name.
const Name = "edge_daily"

// Edge event types (edge streams contract) and the dead-letter markers of
// the edge worker.
const (
	typeRunning  = "running"
	typeDone     = "done"
	typeError    = "error"
	typeCanceled = "canceled"
	stepDead     = "worker.dead_letter"
	codeDead     = "max_deliveries_exceeded"
)

var edgeID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Type returns the edge_daily job type reading db and writing to store.
func Type(db *sqldb.DB, store objstore.Store) pipeline.JobType {
	return pipeline.JobType{
		Name: Name,
		Runner: pipeline.Pipeline{
			pipeline.StageFunc{StageName: "fetch", Fn: func(ctx context.Context, m pipeline.JobMessage, _ any) (any, error) {
				return Fetch(ctx, db, m.Symbol, m.Asof)
			}},
			pipeline.StageFunc{StageName: "transform", Fn: func(_ context.Context, m pipeline.JobMessage, in any) (any, error) {
				return Transform(m.Symbol, m.Asof, in.(*Events))
			}},
			pipeline.StageFunc{StageName: "quality", Fn: func(_ context.Context, _ pipeline.JobMessage, in any) (any, error) {
				r := in.(*Report)
				return r, Quality(r)
			}},
			pipeline.StageFunc{StageName: "storage", Fn: func(ctx context.Context, _ pipeline.JobMessage, in any) (any, error) {
				ref, _, err := Store(ctx, store, in.(*Report))
				return ref, err
			}},
		},
		Validate: func(m pipeline.JobMessage) error {
			if !edgeID.MatchString(m.Symbol) {
				return fmt.Errorf("edge_daily: symbol must be an edge id (%s)", edgeID)
			}
			return nil
		},
	}
}

// Event is one synced edge event, as much of it as the report needs.
type Event struct {
	JobID string
	Type  string
	Step  string
	Task  string
	TS    int64 // edge clock, Unix ms
	Code  string
}

// Events are a day's events grouped by job, plus the earlier starts of
// jobs that ended that day.
type Events struct {
	Count int
	Jobs  map[string][]Event
	// Starts are the earliest running events, outside the day, of jobs
	// that ended in it without one inside it.
	Starts map[string]int64
}

// Fetch reads the edge's events whose edge timestamp falls in the UTC day
// asof (index edge_events_day), and the running events, from other days,
// of jobs whose terminal event is in it. An edge that has not yet
// delivered past the end of a day that has ended: UPSTREAM_INCOMPLETE
// (retried, see checkDelivered). No event: UPSTREAM_EMPTY.
func Fetch(ctx context.Context, db *sqldb.DB, edge, asof string) (*Events, error) {
	day, err := pipeline.ParseAsof(asof)
	if err != nil {
		return nil, pipeline.Fail(pipeline.CodeInvalidMessage, "asof is not a date")
	}
	from, to := day.UnixMilli(), day.Add(24*time.Hour).UnixMilli()
	// Checked before the day is read: delivery only moves forward, so
	// the events read next are the whole day. A day that has not ended
	// (an operator's report of today) is the day so far, by request.
	now, err := db.Clock(ctx)
	if err != nil {
		return nil, pipeline.Fail(pipeline.CodeRepoUnavailable, "reading the database clock: "+err.Error())
	}
	if now.UnixMilli() >= to {
		if err := checkDelivered(ctx, db, edge, to); err != nil {
			return nil, err
		}
	}
	rows, err := db.QueryContext(ctx, db.Rebind(`SELECT job_id, type, step, COALESCE(task, ''), ts,
		CASE WHEN type = 'error' THEN data ELSE '' END
		FROM edge_events WHERE edge_id = ? AND ts >= ? AND ts < ? ORDER BY job_id, entry_ms, entry_seq`), edge, from, to)
	if err != nil {
		return nil, pipeline.Fail(pipeline.CodeRepoUnavailable, "reading edge events: "+err.Error())
	}
	defer rows.Close()
	ev := &Events{Jobs: map[string][]Event{}, Starts: map[string]int64{}}
	for rows.Next() {
		var e Event
		var data string
		if err := rows.Scan(&e.JobID, &e.Type, &e.Step, &e.Task, &e.TS, &data); err != nil {
			return nil, pipeline.Fail(pipeline.CodeRepoUnavailable, "reading edge events: "+err.Error())
		}
		if e.Type == typeError {
			e.Code = errorCode(data)
		}
		ev.Jobs[e.JobID] = append(ev.Jobs[e.JobID], e)
		ev.Count++
	}
	if err := rows.Err(); err != nil {
		return nil, pipeline.Fail(pipeline.CodeRepoUnavailable, "reading edge events: "+err.Error())
	}
	if ev.Count == 0 {
		return nil, pipeline.Fail(pipeline.CodeUpstreamEmpty, fmt.Sprintf("edge %s synced no job events on %s", edge, asof))
	}
	// Jobs that ended today but started on another day: earlier (running
	// over midnight), or later by the edge clock when it was stepped back
	// across midnight during the job; Transform tells the two apart.
	var missing []string
	for id, es := range ev.Jobs {
		if terminal(es) != nil && first(es, typeRunning) == nil {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	for len(missing) > 0 {
		n := min(len(missing), 500)
		batch := missing[:n]
		missing = missing[n:]
		args := []any{edge, from, to}
		for _, id := range batch {
			args = append(args, id)
		}
		r, err := db.QueryContext(ctx, db.Rebind(`SELECT job_id, MIN(ts) FROM edge_events WHERE edge_id = ? AND type = 'running' AND (ts < ? OR ts >= ?)
			AND job_id IN (`+strings.TrimSuffix(strings.Repeat("?,", n), ",")+`) GROUP BY job_id`), args...)
		if err != nil {
			return nil, pipeline.Fail(pipeline.CodeRepoUnavailable, "reading edge events: "+err.Error())
		}
		for r.Next() {
			var id string
			var ts int64
			if err := r.Scan(&id, &ts); err != nil {
				r.Close()
				return nil, pipeline.Fail(pipeline.CodeRepoUnavailable, err.Error())
			}
			ev.Starts[id] = ts
		}
		r.Close()
	}
	return ev, nil
}

func errorCode(data string) string {
	var d struct {
		Code  string `json:"code"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(data), &d) == nil {
		if d.Code != "" {
			return d.Code
		}
		if d.Error != nil && d.Error.Code != "" {
			return d.Error.Code
		}
	}
	return "unknown"
}

func isTerminal(t string) bool { return t == typeDone || t == typeError || t == typeCanceled }

func terminal(es []Event) *Event {
	for i := range es {
		if isTerminal(es[i].Type) {
			return &es[i]
		}
	}
	return nil
}

// isDeadLetter reports whether e is the error event of a job the edge
// worker dead-lettered (edge/worker deadLetter): it may end a job that
// never ran, since the edge allows queued -> error for a poison message.
func isDeadLetter(e *Event) bool {
	return e.Type == typeError && (e.Step == stepDead || e.Code == codeDead)
}

// mayEndUnstarted reports whether a job may legitimately end with the
// terminal event e and no running event: cancelled or dead-lettered while
// queued.
func mayEndUnstarted(e *Event) bool { return e.Type == typeCanceled || isDeadLetter(e) }

func first(es []Event, typ string) *Event {
	for i := range es {
		if es[i].Type == typ {
			return &es[i]
		}
	}
	return nil
}

// Durations are running-to-terminal times in milliseconds (nearest-rank
// percentiles).
type Durations struct {
	Count int   `json:"count"`
	P50   int64 `json:"p50_ms"`
	P95   int64 `json:"p95_ms"`
}

// TaskStats are one task's figures.
type TaskStats struct {
	Task        string    `json:"task"`
	Jobs        int       `json:"jobs"`
	Done        int       `json:"done"`
	Error       int       `json:"error"`
	Canceled    int       `json:"canceled"`
	DeadLetters int       `json:"dead_letters"`
	Unfinished  int       `json:"unfinished"`
	Duration    Durations `json:"duration"`
	// ClockSteppedBack counts the jobs whose terminal event is stamped
	// before their running event (the edge clock went back during the
	// job); they have no duration.
	ClockSteppedBack int `json:"clock_stepped_back"`
}

// Report is the day's report. It holds nothing but the data (no generation
// time), so the same events always make the same bytes.
type Report struct {
	EdgeID      string         `json:"edge_id"`
	Asof        string         `json:"asof"`
	Events      int            `json:"events"`
	Jobs        int            `json:"jobs"`
	Tasks       []TaskStats    `json:"tasks"`
	ErrorCodes  map[string]int `json:"error_codes"`
	DeadLetters []string       `json:"dead_letters"`
	// ClockSteppedBack names the jobs TaskStats.ClockSteppedBack counts.
	ClockSteppedBack []string `json:"clock_stepped_back"`
	// Violations are the quality stage's findings (not stored: a report
	// with any is refused).
	Violations []string `json:"-"`
}

// Transform computes the report.
func Transform(edge, asof string, ev *Events) (*Report, error) {
	r := &Report{EdgeID: edge, Asof: asof, Events: ev.Count, Jobs: len(ev.Jobs), ErrorCodes: map[string]int{},
		DeadLetters: []string{}, ClockSteppedBack: []string{}}
	byTask := map[string]*TaskStats{}
	durs := map[string][]int64{}
	ids := make([]string, 0, len(ev.Jobs))
	for id := range ev.Jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		es := ev.Jobs[id]
		task := "unknown"
		for _, e := range es {
			if e.Task != "" {
				task = e.Task
				break
			}
		}
		ts := byTask[task]
		if ts == nil {
			ts = &TaskStats{Task: task}
			byTask[task] = ts
		}
		ts.Jobs++
		terms := 0
		for _, e := range es {
			if isTerminal(e.Type) {
				terms++
			}
		}
		end := terminal(es)
		if terms > 1 {
			r.Violations = append(r.Violations, fmt.Sprintf("job %s has %d terminal events", id, terms))
		}
		if end == nil {
			ts.Unfinished++
			continue
		}
		switch end.Type {
		case typeDone:
			ts.Done++
		case typeError:
			ts.Error++
			r.ErrorCodes[end.Code]++
			if isDeadLetter(end) {
				ts.DeadLetters++
				r.DeadLetters = append(r.DeadLetters, id)
			}
		case typeCanceled:
			ts.Canceled++
		}
		start, ok := int64(0), false
		if s := first(es, typeRunning); s != nil {
			start, ok = s.TS, true
		} else if s, found := ev.Starts[id]; found {
			start, ok = s, true
		}
		switch {
		case !ok && !mayEndUnstarted(end):
			r.Violations = append(r.Violations, fmt.Sprintf("job %s: terminal event %s without a running event", id, end.Type))
		case ok && end.TS < start:
			// Event timestamps are the edge's wall clock, which may be
			// stepped back (NTP) during a job: the events are sound, only
			// the duration is unknown, so the day's report still stands.
			ts.ClockSteppedBack++
			r.ClockSteppedBack = append(r.ClockSteppedBack, id)
		case ok:
			durs[task] = append(durs[task], end.TS-start)
		}
	}
	for task, ts := range byTask {
		ts.Duration = percentiles(durs[task])
		r.Tasks = append(r.Tasks, *ts)
	}
	sort.Slice(r.Tasks, func(i, j int) bool { return r.Tasks[i].Task < r.Tasks[j].Task })
	return r, nil
}

func percentiles(d []int64) Durations {
	if len(d) == 0 {
		return Durations{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	rank := func(p float64) int64 { return d[max(int(math.Ceil(p*float64(len(d))))-1, 0)] }
	return Durations{Count: len(d), P50: rank(0.50), P95: rank(0.95)}
}

// Quality refuses a report that contradicts the event model
// (QUALITY_FAILED), naming the first few findings.
func Quality(r *Report) error {
	if len(r.Violations) == 0 {
		return nil
	}
	v := r.Violations
	if len(v) > 5 {
		v = append(v[:5:5], fmt.Sprintf("and %d more", len(r.Violations)-5))
	}
	return pipeline.Fail(pipeline.CodeQualityFailed, strings.Join(v, "; "))
}

// Keys are where a report is stored: edge_daily/<edge>/<asof>.json and .csv.
func Keys(edge, asof string) (jsonKey, csvKey string) {
	base := Name + "/" + edge + "/" + asof
	return base + ".json", base + ".csv"
}

// Encode renders the report as JSON and CSV, deterministically.
func Encode(r *Report) (js, cs []byte, err error) {
	js, err = json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"edge_id", "asof", "task", "jobs", "done", "error", "canceled", "dead_letters", "unfinished", "duration_count", "duration_p50_ms", "duration_p95_ms", "clock_stepped_back"})
	for _, t := range r.Tasks {
		_ = w.Write([]string{r.EdgeID, r.Asof, t.Task, itoa(t.Jobs), itoa(t.Done), itoa(t.Error), itoa(t.Canceled), itoa(t.DeadLetters), itoa(t.Unfinished),
			itoa(t.Duration.Count), strconv.FormatInt(t.Duration.P50, 10), strconv.FormatInt(t.Duration.P95, 10), itoa(t.ClockSteppedBack)})
	}
	w.Flush()
	return append(js, '\n'), b.Bytes(), w.Error()
}

func itoa(n int) string { return strconv.Itoa(n) }

// Store writes the report's JSON and CSV; result_ref names the JSON. An
// unchanged report writes nothing (objstore dedupes by content).
func Store(ctx context.Context, s objstore.Store, r *Report) (ref string, written int, err error) {
	js, cs, err := Encode(r)
	if err != nil {
		return "", 0, pipeline.Fail(pipeline.CodeTransformInvalid, err.Error())
	}
	jk, ck := Keys(r.EdgeID, r.Asof)
	// CSV first: result_ref (the JSON) appears last, when both are there.
	_, w1, err := s.Put(ctx, ck, cs, "text/csv")
	if err != nil {
		return "", 0, pipeline.Fail(pipeline.CodeStorageWriteFailed, err.Error())
	}
	ref, w2, err := s.Put(ctx, jk, js, "application/json")
	if err != nil {
		return "", 0, pipeline.Fail(pipeline.CodeStorageWriteFailed, err.Error())
	}
	for _, w := range []bool{w1, w2} {
		if w {
			written++
		}
	}
	return ref, written, nil
}
