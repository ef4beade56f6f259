package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// inOrder makes an event claimable only while no other event of its job
// is being delivered and no earlier one is still pending, so one job's
// events reach the receiver one at a time, in sequence order, whichever
// dispatcher or pod sends them. A dead-lettered event does not hold the later
// ones back; a redriven one does again, but only once the job's event in
// flight (a later one, sent while it was dead) has finished: two events of a
// job are never delivered at once. It is two probes of the (job_id,
// sequence) unique index: written as one with an OR, the same rule halved
// Postgres' deliveries per second (BenchmarkDeliveries).
const inOrder = `NOT EXISTS (SELECT 1 FROM job_outbox_events e
	WHERE e.job_id = job_outbox_events.job_id
	  AND e.sequence < job_outbox_events.sequence
	  AND e.status IN ('` + schema.OutboxPending + `', '` + schema.OutboxDelivering + `'))
	AND NOT EXISTS (SELECT 1 FROM job_outbox_events e
	WHERE e.job_id = job_outbox_events.job_id
	  AND e.sequence > job_outbox_events.sequence
	  AND e.status = '` + schema.OutboxDelivering + `')`

// Event is one claimed outbox event. Its claim is shared by the goroutine
// delivering it and the one renewing its lease: mu guards the claim's
// writes (Heartbeat's lease expiry, a committed outcome's status).
type Event struct {
	lease.Claim
	mu          sync.Mutex
	JobID       string
	RequesterID string
	Sequence    int64
	URL         string
	Payload     []byte
	CreatedAt   time.Time
	// AgeFrom is when the event's age budget started: its creation, or its
	// last redrive.
	AgeFrom time.Time
	// redriven: the event was redriven since it was created.
	redriven bool
}

// Store is the dispatcher's view of job_outbox_events.
type Store struct {
	DB *sqldb.DB
	q  *lease.Queue
	// inFlight replaces othersInFlight when set (tests).
	inFlight func(context.Context, []*Event) (map[string]bool, error)
}

// NewStore returns a Store on db; now is this process's clock (nil:
// time.Now), corrected to the database clock by the lease queue.
func NewStore(db *sqldb.DB, now func() time.Time) *Store {
	spec := schema.OutboxLease
	spec.Where = inOrder
	// Due time alone: the poll index serves it and the scan stops at the
	// batch size. Per-job order comes from inOrder, not from the sort.
	spec.Order = "next_attempt_at"
	// The claim returns what a delivery needs: no second query.
	spec.Returning = claimColumns
	return &Store{DB: db, q: &lease.Queue{DB: db, Spec: spec, Machine: schema.OutboxTransitions, Now: now, Extra: claimDest}}
}

// claimColumns are returned by the claim for each event, scanned by
// claimDest into an eventRow.
var claimColumns = []string{"job_id", "requester_id", "sequence", "webhook_url", "payload", "created_at", "redriven_at"}

type eventRow struct {
	jobID, requesterID string
	sequence, created  int64
	url                sql.NullString
	payload            []byte
	redriven           sql.NullInt64
}

// rowScanner scans job_id and carries the row it belongs to, so Claim can
// find the row again from Claim.Extra.
type rowScanner struct{ r *eventRow }

func (s rowScanner) Scan(v any) error {
	switch x := v.(type) {
	case string:
		s.r.jobID = x
	case []byte:
		s.r.jobID = string(x)
	default:
		return fmt.Errorf("job_id: unexpected %T", v)
	}
	return nil
}

func claimDest() []any {
	r := &eventRow{}
	return []any{rowScanner{r}, &r.requesterID, &r.sequence, &r.url, &r.payload, &r.created, &r.redriven}
}

// now is the time by the database's clock (lease.Queue.Time), so every
// dispatcher judges due and leased events alike whatever its own clock says.
func (s *Store) now() time.Time { return s.q.Time() }

// Now is the time by the database's clock; the dispatcher schedules
// retries from it.
func (s *Store) Now() time.Time { return s.now() }

// Claim takes up to n due events for worker under a lease of ttl (expired
// delivery leases are reclaimed in the same transaction), in claim order.
// An event that turns out to share its job with another event in flight
// (see yieldToInFlight) is given back rather than returned.
func (s *Store) Claim(ctx context.Context, worker string, n int, ttl time.Duration) ([]*Event, error) {
	claims, err := s.q.Claim(ctx, worker, n, ttl)
	if err != nil || len(claims) == 0 {
		return nil, err
	}
	out := make([]*Event, 0, len(claims))
	check := false
	for _, c := range claims {
		r := c.Extra[0].(rowScanner).r
		c.Extra = nil
		e := &Event{Claim: c, JobID: r.jobID, RequesterID: r.requesterID, Sequence: r.sequence,
			URL: r.url.String, Payload: r.payload, CreatedAt: sqldb.FromMicros(r.created)}
		e.AgeFrom = e.CreatedAt
		if r.redriven.Valid {
			e.AgeFrom = sqldb.FromMicros(r.redriven.Int64)
			e.redriven = true
		}
		// Two events of a job meet in flight only around a redrive: one
		// side holds the redriven event, the other a later event of its
		// job. A batch of neither (a job's first event, never redriven:
		// most of them) has nothing to check.
		check = check || e.mayClash()
		out = append(out, e)
	}
	if !check {
		return out, nil
	}
	return s.yieldToInFlight(ctx, out)
}

// yieldToInFlight gives back the claimed events whose job has another event
// in flight. On Postgres (read committed) inOrder is judged on the claim
// statement's snapshot, which misses claims not yet committed: a claim
// that took a job's later event while its earlier one was dead, and one
// that took the earlier event just after a redrive made it pending again,
// each see no event of the job in flight. Once committed, whichever finds
// the other gives its event back at once (pending, due now, its attempt
// returned), so at most one event of a job is ever sent; when both find
// each other both yield, and the next claim takes the earlier event first.
// SQLite runs claims and redrives one at a time: nothing to check.
//
// When the check itself fails, every event that could clash (redriven, or
// not its job's first) is given back too: sending one unchecked could put
// two events of a job in flight, while giving it back costs one claim. A
// give-back that fails leaves the event to its lease's expiry.
func (s *Store) yieldToInFlight(ctx context.Context, evs []*Event) ([]*Event, error) {
	if s.DB.Engine != sqldb.Postgres {
		return evs, nil
	}
	inFlight := s.inFlight
	if inFlight == nil {
		inFlight = s.othersInFlight
	}
	clash, err := inFlight(ctx, evs)
	if err != nil {
		clash = map[string]bool{}
		for _, e := range evs {
			if e.mayClash() {
				clash[e.ID] = true
			}
		}
	}
	if len(clash) == 0 {
		return evs, nil
	}
	kept := evs[:0:0]
	var ops []Op
	for _, e := range evs {
		if clash[e.ID] {
			ops = append(ops, s.ReleaseOp(e))
		} else {
			kept = append(kept, e)
		}
	}
	_ = s.Apply(ctx, ops)
	return kept, nil
}

// mayClash reports whether e can meet another event of its job in flight:
// only a redriven event, or a later event claimed while an earlier one was
// dead, can (see yieldToInFlight).
func (e *Event) mayClash() bool { return e.redriven || e.Sequence > 1 }

// othersInFlight returns the ids among evs whose job has another event
// being delivered.
func (s *Store) othersInFlight(ctx context.Context, evs []*Event) (map[string]bool, error) {
	args := []any{schema.OutboxDelivering, schema.OutboxDelivering}
	for _, e := range evs {
		args = append(args, e.ID)
	}
	rows, err := s.DB.QueryContext(ctx, s.DB.Rebind(`SELECT e.event_id FROM job_outbox_events e
		WHERE e.status = ? AND EXISTS (SELECT 1 FROM job_outbox_events o
			WHERE o.job_id = e.job_id AND o.event_id <> e.event_id AND o.status = ?)
		  AND e.event_id IN (`+strings.TrimSuffix(strings.Repeat("?,", len(evs)), ",")+`)`), args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: events of jobs in flight: %w", err)
	}
	defer rows.Close()
	clash := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("outbox: events of jobs in flight: %w", err)
		}
		clash[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: events of jobs in flight: %w", err)
	}
	return clash, nil
}

// Heartbeat extends e's delivery lease; a *lease.StaleError means stop.
func (s *Store) Heartbeat(ctx context.Context, e *Event, ttl time.Duration) error {
	e.mu.Lock()
	c := e.Claim
	e.mu.Unlock()
	if err := s.q.Heartbeat(ctx, &c, ttl); err != nil {
		return err
	}
	e.mu.Lock()
	e.LeaseExpiresAt, e.Deadline = c.LeaseExpiresAt, c.Deadline
	e.mu.Unlock()
	return nil
}

const releaseLease = "worker_id = NULL, lease_expires_at = NULL"

// Op is one fenced outcome write: move an event to a status with extra
// columns. Ops are built by Delivered, Retry, Release and DeadLetter and
// written by Apply, many to a transaction.
type Op struct {
	Event *Event
	To    string
	Set   string
	Args  []any
}

// DeliveredOp records a 2xx.
func (s *Store) DeliveredOp(e *Event, code int) Op {
	return Op{e, schema.OutboxDelivered, "delivered_at = ?, last_status_code = ?, last_error = NULL, " + releaseLease,
		[]any{sqldb.Micros(s.now()), code}}
}

// RetryOp returns e to pending until next, with the reason of the failure.
func (s *Store) RetryOp(e *Event, next time.Time, code int, reason string) Op {
	return Op{e, schema.OutboxPending, "next_attempt_at = ?, last_status_code = ?, last_error = ?, " + releaseLease,
		[]any{sqldb.Micros(next), nullCode(code), daemon.CapMessage(reason)}}
}

// ReleaseOp returns an unsent event to pending at once, giving back the
// attempt its claim counted (shutdown before the send started).
func (s *Store) ReleaseOp(e *Event) Op {
	return Op{e, schema.OutboxPending, "next_attempt_at = ?, attempt_count = attempt_count - 1, " + releaseLease,
		[]any{sqldb.Micros(s.now())}}
}

// DeadLetterOp moves e to the outbox dead-letter.
func (s *Store) DeadLetterOp(e *Event, code int, reason string) Op {
	return Op{e, schema.OutboxDeadLetter, "dead_lettered_at = ?, last_status_code = ?, last_error = ?, " + releaseLease,
		[]any{sqldb.Micros(s.now()), nullCode(code), daemon.CapMessage(reason)}}
}

// Apply writes ops in one transaction (one commit for many outcomes; on
// Postgres one statement per kind of outcome, lease.Queue.MoveEach) and
// returns an error per op: a *lease.StaleError for an op whose claim was
// lost, which does not disturb the others. If the transaction itself fails
// the ops are written one by one.
func (s *Store) Apply(ctx context.Context, ops []Op) []error {
	var out []error
	claims := make([]lease.Claim, len(ops))
	steps := make([]lease.Step, len(ops))
	// Read before the transaction holds a connection: a store's first
	// reading measures the database clock on one of its own, which it
	// would wait for on a pool the transaction exhausts.
	now := s.now()
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		// Moves work on copies (a retried transaction starts over from the
		// events' claims); only a committed move changes an event.
		for i, op := range ops {
			op.Event.mu.Lock()
			claims[i] = op.Event.Claim
			op.Event.mu.Unlock()
			steps[i] = lease.Step{Claim: &claims[i], To: op.To, Set: op.Set, Args: op.Args}
		}
		var err error
		out, err = s.q.MoveEach(ctx, tx, steps, now)
		return err
	})
	if err == nil {
		for i, op := range ops {
			if out[i] == nil {
				op.Event.mu.Lock()
				op.Event.Status, op.Event.Seq = claims[i].Status, claims[i].Seq
				op.Event.mu.Unlock()
			}
		}
	}
	if err == nil || len(ops) == 1 {
		if err != nil {
			out = []error{err}
		}
		return out
	}
	out = make([]error, len(ops))
	for i := range ops {
		out[i] = s.Apply(ctx, ops[i:i+1])[0]
	}
	return out
}

func (s *Store) apply1(ctx context.Context, op Op) error { return s.Apply(ctx, []Op{op})[0] }

// Delivered records a 2xx, fenced on e's claim.
func (s *Store) Delivered(ctx context.Context, e *Event, code int) error {
	return s.apply1(ctx, s.DeliveredOp(e, code))
}

// Retry returns e to pending until next.
func (s *Store) Retry(ctx context.Context, e *Event, next time.Time, code int, reason string) error {
	return s.apply1(ctx, s.RetryOp(e, next, code, reason))
}

// Release returns an unsent event to pending at once.
func (s *Store) Release(ctx context.Context, e *Event) error { return s.apply1(ctx, s.ReleaseOp(e)) }

// DeadLetter moves e to the outbox dead-letter.
func (s *Store) DeadLetter(ctx context.Context, e *Event, code int, reason string) error {
	return s.apply1(ctx, s.DeadLetterOp(e, code, reason))
}

func nullCode(code int) any {
	if code == 0 {
		return nil
	}
	return code
}

// RedriveFilter selects dead-lettered events to put back. At least one
// field must be set; set fields are ANDed.
type RedriveFilter struct {
	EventIDs []string
	JobID    string
	Since    time.Time // dead-lettered at or after
}

// ErrEmptyFilter is returned by Redrive without any selector.
var ErrEmptyFilter = errors.New("outbox redrive: give event ids, a job id or a since time")

// MaxRedriveEventIDs is the most event ids one Redrive takes. Each id is a
// bound parameter, and the engines refuse a statement with too many of them
// (Postgres at 65,535, SQLite at 32,766) with an error that names no cause;
// a larger set is redriven in several calls, or by job id or time.
const MaxRedriveEventIDs = 1000

// ErrTooManyEventIDs is matched (errors.Is) by a *TooManyEventIDsError.
var ErrTooManyEventIDs = errors.New("outbox redrive: too many event ids")

// TooManyEventIDsError refuses a redrive of more than MaxRedriveEventIDs
// event ids; nothing was changed.
type TooManyEventIDsError struct{ Count int }

func (e *TooManyEventIDsError) Error() string {
	return fmt.Sprintf("outbox redrive: %d event ids; at most %d per call", e.Count, MaxRedriveEventIDs)
}

func (e *TooManyEventIDsError) Unwrap() error { return ErrTooManyEventIDs }

// CheckRedriveEventIDs refuses more than MaxRedriveEventIDs ids (a
// *TooManyEventIDsError), for callers that check what they were given before
// they open the database.
func CheckRedriveEventIDs(ids []string) error {
	if len(ids) > MaxRedriveEventIDs {
		return &TooManyEventIDsError{Count: len(ids)}
	}
	return nil
}

// Redrive moves matching dead-lettered events back to pending, due now, with
// a fresh attempt count and age budget; a new claim_version fences out
// anything that still held them. It returns how many moved. At most
// MaxRedriveEventIDs event ids are taken (a *TooManyEventIDsError).
func (s *Store) Redrive(ctx context.Context, f RedriveFilter) (int64, error) {
	if len(f.EventIDs) == 0 && f.JobID == "" && f.Since.IsZero() {
		return 0, ErrEmptyFilter
	}
	if err := CheckRedriveEventIDs(f.EventIDs); err != nil {
		return 0, err
	}
	if err := schema.OutboxTransitions.Check(schema.OutboxDeadLetter, schema.OutboxPending); err != nil {
		return 0, err
	}
	now := sqldb.Micros(s.now())
	where := []string{"status = ?"}
	args := []any{schema.OutboxPending, now, now, schema.OutboxDeadLetter}
	if len(f.EventIDs) > 0 {
		where = append(where, "event_id IN ("+strings.TrimSuffix(strings.Repeat("?,", len(f.EventIDs)), ",")+")")
		for _, id := range f.EventIDs {
			args = append(args, id)
		}
	}
	if f.JobID != "" {
		where = append(where, "job_id = ?")
		args = append(args, f.JobID)
	}
	if !f.Since.IsZero() {
		where = append(where, "dead_lettered_at >= ?")
		args = append(args, sqldb.Micros(f.Since))
	}
	q := `UPDATE job_outbox_events SET status = ?, next_attempt_at = ?, redriven_at = ?, attempt_count = 0,
		dead_lettered_at = NULL, claim_version = claim_version + 1, worker_id = NULL, lease_expires_at = NULL
		WHERE ` + strings.Join(where, " AND ")
	var n int64
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.DB.Rebind(q), args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		if err != nil || n == 0 || s.DB.Engine != sqldb.Postgres {
			return err
		}
		_, err = tx.ExecContext(ctx, "SELECT pg_notify('"+NotifyChannel+"', '')")
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox redrive: %w", err)
	}
	return n, nil
}

// DeadLetterCount is the number of events in the outbox dead-letter.
func (s *Store) DeadLetterCount(ctx context.Context) (int64, error) {
	var n int64
	err := s.DB.QueryRowContext(ctx, s.DB.Rebind("SELECT COUNT(*) FROM job_outbox_events WHERE status = ?"), schema.OutboxDeadLetter).Scan(&n)
	return n, err
}

// NextDue returns when the earliest pending event is due; ok is false when
// none is pending.
func (s *Store) NextDue(ctx context.Context) (at time.Time, ok bool, err error) {
	var us sql.NullInt64
	// The status a literal, so Postgres plans it on the partial index of
	// pending events.
	err = s.DB.QueryRowContext(ctx, "SELECT MIN(next_attempt_at) FROM job_outbox_events WHERE status = '"+schema.OutboxPending+"'").Scan(&us)
	if err != nil || !us.Valid {
		return time.Time{}, false, err
	}
	return sqldb.FromMicros(us.Int64), true, nil
}

// Due reports whether any event is claimable now; the SQLite wake-up asks it
// after every commit before paying for a write transaction.
func (s *Store) Due(ctx context.Context) (bool, error) {
	var one int
	err := s.DB.QueryRowContext(ctx, s.DB.Rebind(
		"SELECT 1 FROM job_outbox_events WHERE status = ? AND next_attempt_at <= ? AND "+inOrder+" LIMIT 1"),
		schema.OutboxPending, sqldb.Micros(s.now())).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
