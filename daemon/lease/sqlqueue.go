package lease

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Spec names the columns of a leased table, so one implementation of claim,
// heartbeat, reclaim and fenced writes serves every queue (the transcode
// inbox, the webhook outbox, …). Time columns hold Unix microseconds.
type Spec struct {
	Table        string
	ID           string // primary key, text
	Status       string
	WorkerID     string
	LeaseExpires string
	HeartbeatAt  string
	ClaimVersion string
	// AttemptCount, when set, is incremented by every claim: a claim starts a
	// new execution (or delivery) attempt.
	AttemptCount string
	// ReadyAt, when set, makes a row claimable only once ReadyAt <= now
	// (retry backoff, scheduled work).
	ReadyAt string
	// Sequence, when set, is a per-row counter bumped by every status write
	// and returned, so each transition can number the event it records.
	Sequence string
	// UpdatedAt, when set, is stamped by every write through the queue.
	UpdatedAt string
	// Order is the ORDER BY of the claim scan, e.g. "priority DESC, next_attempt_at".
	Order string
	// Returning lists extra columns a claim returns for each row, scanned
	// into the destinations Queue.Extra makes (Claim.Extra), so a caller
	// needs no second query to learn what it claimed.
	Returning []string
	// Where, when set, is an extra predicate of the claim scan, written
	// against the unaliased table (e.g. the outbox's "no earlier event of
	// this job is still undelivered", which keeps per-job order).
	Where string
	// ClaimByKey, on Postgres, has the claim update the rows it picked by
	// primary key (id = ANY(ARRAY(pick ... FOR UPDATE SKIP LOCKED))) instead
	// of joining the picking CTE, which the planner may hash against the
	// whole table once a batch is large: for a table that keeps its finished
	// rows. The rows claimed, their locking and the writes are the same.
	ClaimByKey bool

	Ready   string   // the status a claim takes rows from
	Claimed string   // the status a claim moves rows to
	Leased  []string // statuses held under a lease; expired ones are reclaimed
	// Requeue is where an expired lease returns its row when the queue has
	// no OnExpire hook.
	Requeue string
}

// Claim is a worker's hold on one row. Version is the fencing token every
// write carries; Status is the row's status as this worker last wrote it.
type Claim struct {
	ID             string
	Version        int64
	Attempt        int
	Status         string
	Seq            int64
	Worker         string
	LeaseExpiresAt time.Time
	// Deadline is LeaseExpiresAt by this process's monotonic clock, as the
	// claim (or a Heartbeat on this Claim) left it: Keep fences the work
	// there (Until), however late after the claim the work starts.
	Deadline time.Time
	// At is the time the claim stamped on the row, by the queue's clock
	// (Queue.Time). A final write whose time comes from another clock
	// must not record a finish before it.
	At time.Time
	// Extra holds the Spec.Returning columns of a fresh claim.
	Extra []any
}

// Execer is what fenced writes run on: a *sql.Tx inside sqldb.DB.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Queue runs the lease protocol on one table of one database.
type Queue struct {
	DB      *sqldb.DB
	Spec    Spec
	Machine Transitions
	// Now is this process's clock; nil means time.Now. Lease times are the
	// database's (Time). With Now set and Elapsed nil, Now carries them
	// between measurements of the offset, so a fake Now that tests move
	// forward moves lease time with it.
	Now func() time.Time
	// Elapsed is a clock that is never stepped: the time since any fixed
	// origin; nil means Go's monotonic clock. Unless only Now is set, lease
	// time between measurements of the database clock is counted on it, so
	// a step of the wall clock (NTP, `date -s`) moves no lease.
	Elapsed func() time.Duration
	// OnClaim runs inside the claim transaction with the rows just claimed
	// (Status = Spec.Claimed, the transition from Spec.Ready). The inbox
	// records its outbox events here.
	OnClaim func(ctx context.Context, tx *sql.Tx, claims []Claim, now time.Time) error
	// OnExpire, when set, runs inside the claim (or Reclaim) transaction with
	// rows whose lease had expired. Each has already been fenced with a new
	// claim version (Version) and lost its worker and lease, but keeps the
	// status it had (Status); the hook must move it along Machine with Move.
	// Without a hook the row goes to Spec.Requeue.
	OnExpire func(ctx context.Context, tx *sql.Tx, expired []Claim, now time.Time) error
	// Extra returns fresh scan destinations for Spec.Returning (pointers,
	// as for Rows.Scan); required when Returning is set.
	Extra func() []any

	clock                              dbClock
	colMu                              sync.Mutex
	colTypes                           map[string]string   // the table's declared column types, read by MoveEach
	setCols                            map[string][]argCol // per Step.Set, the column of each ?
	once                               sync.Once
	buildErr                           error
	claimSQL, reclaimSQL, heartbeatSQL string
}

// build prepares the queue's SQL once, on first use (set the fields
// before that). The status writes the built SQL makes without a Move — the
// claim (Ready → Claimed) and, without an OnExpire hook, the reclaim (each
// Leased status → Requeue) — are checked against Machine first: a Spec
// that contradicts its state machine builds no SQL, and every claim,
// heartbeat and reclaim returns Validate's error instead of writing moves
// the machine forbids.
func (q *Queue) build() error {
	q.once.Do(func() {
		if q.buildErr = q.Validate(); q.buildErr == nil {
			q.buildSQL()
		}
	})
	return q.buildErr
}

// Validate checks the status writes the queue's SQL makes without Move
// against Machine: the claim (Spec.Ready → Spec.Claimed) and, when OnExpire
// is nil, the requeue of every expired lease (each Spec.Leased status →
// Spec.Requeue). Call it where the queue is set up, so a misconfigured
// queue stops the program at start; every claim, heartbeat and reclaim
// returns the same error otherwise.
func (q *Queue) Validate() error {
	s := q.Spec
	bad := func(move string, err error) error {
		return fmt.Errorf("lease: queue %s: %s is not allowed by its state machine: %w", s.Table, move, err)
	}
	if s.Ready == "" || s.Claimed == "" || len(s.Leased) == 0 {
		return fmt.Errorf("lease: queue %s: Spec needs Ready, Claimed and Leased statuses", s.Table)
	}
	if err := q.Machine.Check(s.Ready, s.Claimed); err != nil {
		return bad("claim "+s.Ready+" -> "+s.Claimed, err)
	}
	if q.OnExpire == nil {
		if s.Requeue == "" {
			return fmt.Errorf("lease: queue %s: Spec.Requeue is required without an OnExpire hook", s.Table)
		}
		for _, l := range s.Leased {
			if err := q.Machine.Check(l, s.Requeue); err != nil {
				return bad("reclaim "+l+" -> "+s.Requeue, err)
			}
		}
	}
	return nil
}

func (q *Queue) buildSQL() {
	s := q.Spec
	var set strings.Builder
	fmt.Fprintf(&set, "%s = %s, %s = ?, %s = ?, %s = ?, %s = %s + 1", s.Status, quoteList([]string{s.Claimed}), s.WorkerID, s.LeaseExpires, s.HeartbeatAt, s.ClaimVersion, s.ClaimVersion)
	ret := append([]string{s.ID, s.ClaimVersion, zeroIf(s.AttemptCount), zeroIf(s.Sequence)}, s.Returning...)
	if s.AttemptCount != "" {
		fmt.Fprintf(&set, ", %s = %s + 1", s.AttemptCount, s.AttemptCount)
	}
	if s.Sequence != "" {
		fmt.Fprintf(&set, ", %s = %s + 1", s.Sequence, s.Sequence)
	}
	if s.UpdatedAt != "" {
		fmt.Fprintf(&set, ", %s = ?", s.UpdatedAt)
	}
	// Statuses are inlined as literals (they are constants of the spec) so
	// Postgres can use partial indexes even with generic prepared plans.
	where := fmt.Sprintf("%s = %s", s.Status, quoteList([]string{s.Ready}))
	if s.ReadyAt != "" {
		where += fmt.Sprintf(" AND %s <= ?", s.ReadyAt)
	}
	if s.Where != "" {
		where += " AND (" + s.Where + ")"
	}
	order := s.Order
	if order == "" {
		order = s.ID
	}
	sel := fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT ?", s.ID, s.Table, where, order)
	switch {
	case q.DB.Engine == sqldb.Postgres && s.ClaimByKey:
		// The sublink locks the chosen rows once; the update finds them by
		// primary key.
		q.claimSQL = fmt.Sprintf("UPDATE %s t SET %s WHERE t.%s = ANY(ARRAY(%s FOR UPDATE SKIP LOCKED)) RETURNING %s",
			s.Table, set.String(), s.ID, sel, qualify("t", ret))
	case q.DB.Engine == sqldb.Postgres:
		// The CTE locks the chosen rows once; concurrent claimers skip them.
		q.claimSQL = fmt.Sprintf("WITH c AS (%s FOR UPDATE SKIP LOCKED) UPDATE %s t SET %s FROM c WHERE t.%s = c.%s RETURNING %s",
			sel, s.Table, set.String(), s.ID, s.ID, qualify("t", ret))
	default:
		// OR FAIL: a constraint error ends the statement without undoing
		// its earlier rows, and the caller rolls the whole transaction back
		// anyway. With the default (ABORT) SQLite gives every multi-row
		// update (RETURNING makes it one) a statement journal, copying
		// each page it touches to memory and freeing it at the end: a
		// large share of a SQLite burn-down's CPU (docs/central.md).
		q.claimSQL = fmt.Sprintf("UPDATE OR FAIL %s SET %s WHERE %s IN (%s) RETURNING %s", s.Table, set.String(), s.ID, sel, strings.Join(ret, ", "))
	}

	var rset strings.Builder
	fmt.Fprintf(&rset, "%s = %s + 1, %s = NULL, %s = NULL", s.ClaimVersion, s.ClaimVersion, s.WorkerID, s.LeaseExpires)
	if q.OnExpire == nil {
		fmt.Fprintf(&rset, ", %s = '%s'", s.Status, s.Requeue)
		if s.Sequence != "" {
			fmt.Fprintf(&rset, ", %s = %s + 1", s.Sequence, s.Sequence)
		}
	}
	// With an OnExpire hook the hook's own move stamps UpdatedAt; the
	// reclaim leaves it alone, so the hook still reads the time of the
	// lost attempt's claim (the pipeline's started_at).
	if s.UpdatedAt != "" && q.OnExpire == nil {
		fmt.Fprintf(&rset, ", %s = ?", s.UpdatedAt)
	}
	rsel := fmt.Sprintf("SELECT %s FROM %s WHERE %s AND %s < ? ORDER BY %s LIMIT ?",
		s.ID, s.Table, statusIn(s.Status, s.Leased), s.LeaseExpires, s.LeaseExpires)
	rret := []string{s.ID, s.Status, s.ClaimVersion, zeroIf(s.AttemptCount), zeroIf(s.Sequence)}
	if q.DB.Engine == sqldb.Postgres {
		q.reclaimSQL = fmt.Sprintf("WITH c AS (%s FOR UPDATE SKIP LOCKED) UPDATE %s t SET %s FROM c WHERE t.%s = c.%s RETURNING %s",
			rsel, s.Table, rset.String(), s.ID, s.ID, qualify("t", rret))
	} else {
		// OR FAIL as in the claim.
		q.reclaimSQL = fmt.Sprintf("UPDATE OR FAIL %s SET %s WHERE %s IN (%s) RETURNING %s", s.Table, rset.String(), s.ID, rsel, strings.Join(rret, ", "))
	}
	q.heartbeatSQL = fmt.Sprintf("UPDATE %s SET %s = ?, %s = ? WHERE %s = ? AND %s = ? AND %s",
		s.Table, s.LeaseExpires, s.HeartbeatAt, s.ID, s.ClaimVersion, statusIn(s.Status, s.Leased))
}

func zeroIf(col string) string {
	if col == "" {
		return "0"
	}
	return col
}

func qualify(alias string, cols []string) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		if c == "0" {
			out[i] = c
			continue
		}
		out[i] = alias + "." + c
	}
	return strings.Join(out, ", ")
}

// statusIn is "col IN ('a', 'b')", or "col = 'a'" for one status: SQLite
// uses a partial index (WHERE status = 'delivering') only for a term that
// matches its WHERE, and "status IN ('delivering')" does not, so the
// reclaim scanned the whole table inside the write transaction (the outbox's
// grows by every event ever written; the chaos run slowed from 48 to 9 jobs/s
// as it did).
func statusIn(col string, vals []string) string {
	if len(vals) == 1 {
		return col + " = " + quoteList(vals)
	}
	return col + " IN (" + quoteList(vals) + ")"
}

func quoteList(vals []string) string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
	}
	return strings.Join(out, ", ")
}

// Claim atomically takes up to n ready rows for worker under a lease of
// ttl. In the same transaction it first reclaims up to n rows whose lease
// expired (new claim version, OnExpire or Requeue), then claims: on Postgres
// with FOR UPDATE SKIP LOCKED so concurrent claimers never block on or share
// a row, on SQLite inside one BEGIN IMMEDIATE transaction. Each claimed row
// gets worker_id, status Claimed, lease_expires_at = now+ttl, heartbeat_at,
// claim_version+1 and attempt_count+1.
func (q *Queue) Claim(ctx context.Context, worker string, n int, ttl time.Duration) ([]Claim, error) {
	if err := q.build(); err != nil {
		return nil, err
	}
	q.Time() // the first measurement of the database clock, before the transaction holds a connection
	var out []Claim
	err := q.DB.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = q.ClaimTx(ctx, tx, worker, n, ttl, q.Time())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: claim: %w", q.Spec.Table, err)
	}
	return out, nil
}

// ClaimTx is Claim inside a transaction the caller owns (which must be a
// sqldb.DB.Tx transaction), for callers that write more in the same commit.
// now is Time's; while the database clock has never been measured it is
// measured on tx and that reading is used instead (the claims' At says
// which).
func (q *Queue) ClaimTx(ctx context.Context, tx *sql.Tx, worker string, n int, ttl time.Duration, now time.Time) ([]Claim, error) {
	if err := q.build(); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, nil
	}
	// now comes from Time; an unmeasured clock is measured on tx (timeOn)
	// and its reading replaces now.
	if t, fresh, err := q.timeOn(ctx, tx); err != nil {
		return nil, err
	} else if fresh {
		now = t
	}
	if _, err := q.reclaim(ctx, tx, now, n); err != nil {
		return nil, err
	}
	claims, err := q.claim(ctx, tx, worker, n, ttl, now)
	if err != nil {
		return nil, err
	}
	if q.OnClaim != nil && len(claims) > 0 {
		if err := q.OnClaim(ctx, tx, claims, now); err != nil {
			return nil, err
		}
	}
	return claims, nil
}

func (q *Queue) claim(ctx context.Context, tx *sql.Tx, worker string, n int, ttl time.Duration, now time.Time) ([]Claim, error) {
	s := q.Spec
	nowUS := sqldb.Micros(now)
	exp := now.Add(ttl)
	setArgs := []any{worker, sqldb.Micros(exp), nowUS}
	if s.UpdatedAt != "" {
		setArgs = append(setArgs, nowUS)
	}
	var selArgs []any
	if s.ReadyAt != "" {
		selArgs = append(selArgs, nowUS)
	}
	selArgs = append(selArgs, n)
	var args []any
	if q.DB.Engine == sqldb.Postgres && !s.ClaimByKey {
		args = append(selArgs, setArgs...)
	} else {
		args = append(setArgs, selArgs...)
	}
	// now may have been read well before this point; the database clock
	// read after the local one turns the lease's end into a deadline no
	// later than the one the database will judge.
	local := time.Now()
	deadline := local.Add(exp.Sub(q.Time()))
	rows, err := q.DB.QueryTx(ctx, tx, q.claimSQL, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	claims := make([]Claim, 0, n)
	for rows.Next() {
		c := Claim{Status: s.Claimed, Worker: worker, LeaseExpiresAt: exp, Deadline: deadline, At: now}
		dest := []any{&c.ID, &c.Version, &c.Attempt, &c.Seq}
		if len(s.Returning) > 0 {
			c.Extra = q.Extra()
			dest = append(dest, c.Extra...)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		claims = append(claims, c)
	}
	return claims, rows.Err()
}

// Reclaim fences up to n rows whose lease expired before now and hands them
// to OnExpire (or requeues them). Claim does this itself; a sweeper may call
// it to recover rows while no worker is claiming.
func (q *Queue) Reclaim(ctx context.Context, n int) (int, error) {
	if err := q.build(); err != nil {
		return 0, err
	}
	q.Time() // the first measurement of the database clock, before the transaction holds a connection
	var count int
	err := q.DB.Tx(ctx, func(tx *sql.Tx) error {
		now, _, err := q.timeOn(ctx, tx)
		if err != nil {
			return err
		}
		count, err = q.reclaim(ctx, tx, now, n)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("%s: reclaim: %w", q.Spec.Table, err)
	}
	return count, nil
}

func (q *Queue) reclaim(ctx context.Context, tx *sql.Tx, now time.Time, n int) (int, error) {
	nowUS := sqldb.Micros(now)
	var setArgs []any
	if q.Spec.UpdatedAt != "" && q.OnExpire == nil {
		setArgs = append(setArgs, nowUS)
	}
	selArgs := []any{nowUS, n}
	var args []any
	if q.DB.Engine == sqldb.Postgres {
		args = append(selArgs, setArgs...)
	} else {
		args = append(setArgs, selArgs...)
	}
	rows, err := q.DB.QueryTx(ctx, tx, q.reclaimSQL, args...)
	if err != nil {
		return 0, err
	}
	var expired []Claim
	for rows.Next() {
		var c Claim
		if err := rows.Scan(&c.ID, &c.Status, &c.Version, &c.Attempt, &c.Seq); err != nil {
			rows.Close()
			return 0, err
		}
		expired = append(expired, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if q.OnExpire != nil && len(expired) > 0 {
		if err := q.OnExpire(ctx, tx, expired, now); err != nil {
			return 0, err
		}
	}
	return len(expired), nil
}

// Heartbeat extends c's lease to now+ttl, only while c.Version is still the
// row's claim_version and the row is in a leased status; otherwise it
// returns a *StaleError and the worker must stop.
func (q *Queue) Heartbeat(ctx context.Context, c *Claim, ttl time.Duration) error {
	if err := q.build(); err != nil {
		return err
	}
	sent := time.Now()
	q.Time() // the first measurement of the database clock, before the transaction holds a connection
	var exp time.Time
	err := q.DB.Tx(ctx, func(tx *sql.Tx) error {
		now, _, err := q.timeOn(ctx, tx)
		if err != nil {
			return err
		}
		exp = now.Add(ttl)
		res, err := q.DB.ExecTx(ctx, tx, q.heartbeatSQL, sqldb.Micros(exp), sqldb.Micros(now), c.ID, c.Version)
		if err != nil {
			return err
		}
		return q.fenced(res, c)
	})
	if err != nil {
		return fmt.Errorf("%s: heartbeat: %w", q.Spec.Table, err)
	}
	c.LeaseExpiresAt, c.Deadline = exp, sent.Add(ttl)
	return nil
}

// Exec runs a fenced write "UPDATE table SET <set> WHERE id=? AND
// claim_version=? AND status IN (Leased)" in tx. Zero rows means the claim
// is stale: *StaleError. The status term matters because a Move keeps
// claim_version: without it a late write of the worker that finished or
// handed back the row would still land. set must not change the status
// column; use Move for that.
func (q *Queue) Exec(ctx context.Context, tx Execer, c *Claim, set string, args ...any) error {
	s := q.Spec
	query := fmt.Sprintf("UPDATE %s SET %s WHERE %s = ? AND %s = ? AND %s", s.Table, set, s.ID, s.ClaimVersion, statusIn(s.Status, s.Leased))
	res, err := q.DB.ExecTx(ctx, tx, query, append(args, c.ID, c.Version)...)
	if err != nil {
		return fmt.Errorf("%s %s: %w", q.Spec.Table, c.ID, err)
	}
	return q.fenced(res, c)
}

// Move changes c's row from c.Status to to inside tx, after checking the move
// against Machine (and that to is not Spec.Claimed, which only a claim
// writes), fenced on claim_version and the current status. extraSet
// ("col = ?, col2 = ?") and extraArgs are written in the same statement. On
// success c.Status and c.Seq (the bumped sequence) are updated.
func (q *Queue) Move(ctx context.Context, tx Execer, c *Claim, to string, now time.Time, extraSet string, extraArgs ...any) error {
	if err := q.check(c.Status, to); err != nil {
		return err
	}
	s := q.Spec
	set, args, seq := q.moveSet(to, now, 1, extraSet, extraArgs, 3)
	query := fmt.Sprintf("UPDATE %s SET %s WHERE %s = ? AND %s = ? AND %s = ? RETURNING %s",
		s.Table, set, s.ID, s.ClaimVersion, s.Status, seq)
	args = append(args, c.ID, c.Version, c.Status)
	var newSeq int64
	err := q.DB.QueryRowTx(ctx, tx, query, args...).Scan(&newSeq)
	if errors.Is(err, sql.ErrNoRows) {
		return &StaleError{Table: s.Table, ID: c.ID, Version: c.Version}
	}
	if err != nil {
		return fmt.Errorf("%s %s: %s -> %s: %w", s.Table, c.ID, c.Status, to, err)
	}
	c.Status = to
	c.Seq = newSeq
	return nil
}

// check is the test every status write through Move, MoveEach and MoveMany
// passes: from -> to must be allowed by Machine, and must not enter
// Spec.Claimed. Only a claim may: it grants the lease and the new claim
// version that status stands for. A worker that handed its row back keeps
// its claim_version, so its move into Claimed would otherwise match, and
// leave a row claimed under no lease, which no reclaim finds.
func (q *Queue) check(from, to string) error {
	if err := q.Machine.Check(from, to); err != nil {
		return err
	}
	if to == q.Spec.Claimed {
		return &TransitionError{Machine: q.Machine.Machine, From: from, To: to, Reason: "only a claim moves a row to " + to}
	}
	return nil
}

// moveSet builds the SET clause of a status write to to, shared by Move and
// MoveMany: the status, updated_at (when the spec has one), extraSet, and the
// sequence advanced by hops (one number per recorded transition). It returns
// the clause, its arguments (with capacity for more arguments the caller
// appends) and the column that holds the new sequence ("0" when the spec
// has none).
func (q *Queue) moveSet(to string, now time.Time, hops int, extraSet string, extraArgs []any, more int) (set string, args []any, seq string) {
	s := q.Spec
	var b strings.Builder
	args = make([]any, 0, len(extraArgs)+2+more)
	fmt.Fprintf(&b, "%s = ?", s.Status)
	args = append(args, to)
	if s.UpdatedAt != "" {
		fmt.Fprintf(&b, ", %s = ?", s.UpdatedAt)
		args = append(args, sqldb.Micros(now))
	}
	if extraSet != "" {
		b.WriteString(", " + extraSet)
		args = append(args, extraArgs...)
	}
	seq = "0"
	if s.Sequence != "" {
		fmt.Fprintf(&b, ", %s = %s + %d", s.Sequence, s.Sequence, hops)
		seq = s.Sequence
	}
	return b.String(), args, seq
}

func (q *Queue) fenced(res sql.Result, c *Claim) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return &StaleError{Table: q.Spec.Table, ID: c.ID, Version: c.Version}
	}
	return nil
}

// MoveMany moves every claim in claims along path (each hop checked against
// Machine) with one fenced statement: rows whose claim_version or status no
// longer match are left alone and returned as stale. The row's Sequence
// advances by len(path), one number per recorded transition; on return each
// moved claim has Status = the last state and Seq = its final sequence. A
// worker with nothing to do between states (a no-op executor, a batch
// drain) uses it to record the whole path in one write. Claims naming one
// row twice are refused with ErrRepeatedClaim before anything is written,
// as in MoveEach.
func (q *Queue) MoveMany(ctx context.Context, tx Execer, claims []*Claim, path []string, now time.Time, extraSet string, extraArgs ...any) (stale []*Claim, err error) {
	if len(claims) == 0 || len(path) == 0 {
		return nil, nil
	}
	at := make(map[string]int, len(claims))
	if err := q.refuseRepeats(len(claims), func(i int) string { return claims[i].ID }, at); err != nil {
		return nil, err
	}
	from := claims[0].Status
	for _, c := range claims {
		if c.Status != from {
			return nil, fmt.Errorf("%s: MoveMany needs claims in one status, got %s and %s", q.Spec.Table, from, c.Status)
		}
	}
	prev := from
	for _, to := range path {
		if err := q.check(prev, to); err != nil {
			return nil, err
		}
		prev = to
	}
	set, args, seq := q.moveSet(prev, now, len(path), extraSet, extraArgs, 3)
	var query string
	if q.DB.Engine == sqldb.SQLite {
		query, args, err = q.moveJSONQuery(claims, from, set, seq, args)
	} else {
		query, args = q.moveArraysQuery(claims, from, set, seq, args)
	}
	if err != nil {
		return nil, err
	}
	rows, err := q.DB.QueryTx(ctx, tx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %s -> %s: %w", q.Spec.Table, from, prev, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		if i, ok := at[id]; ok {
			claims[i].Status, claims[i].Seq = prev, n
			delete(at, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// What the statement did not return was fenced out: stale.
	for _, c := range claims {
		if _, ok := at[c.ID]; ok {
			stale = append(stale, c)
		}
	}
	return stale, nil
}

// moveArraysQuery is MoveMany's statement on Postgres: the (id, version)
// pairs travel as two array parameters.
func (q *Queue) moveArraysQuery(claims []*Claim, from, set, seq string, args []any) (string, []any) {
	s := q.Spec
	ids, versions := make([]string, len(claims)), make([]int64, len(claims))
	for i, c := range claims {
		ids[i], versions[i] = c.ID, c.Version
	}
	args = append(args, ids, versions, from)
	return fmt.Sprintf("UPDATE %s t SET %s FROM unnest(?::text[], ?::bigint[]) AS v(id, ver) WHERE t.%s = v.id AND t.%s = v.ver AND t.%s = ? RETURNING t.%s, %s",
		s.Table, set, s.ID, s.ClaimVersion, s.Status, s.ID, qualify("t", []string{seq})), args
}

// Preparer is satisfied by *sql.Tx, for callers that prepare a statement
// once and execute it per row.
type Preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// moveJSONQuery is MoveMany's statement on SQLite: the (id, version) pairs
// as one JSON parameter joined to the primary key (the driver binds
// parameters in quadratic time, so one parameter it is, and one cached
// statement for every batch size).
func (q *Queue) moveJSONQuery(claims []*Claim, from, set, seq string, setArgs []any) (string, []any, error) {
	s := q.Spec
	pairs := make([][2]any, len(claims))
	for i, c := range claims {
		pairs[i] = [2]any{c.ID, c.Version}
	}
	keys, err := json.Marshal(pairs)
	if err != nil {
		return "", nil, err
	}
	args := append(append([]any{}, setArgs...), string(keys), from)
	ret := seq
	if seq != "0" {
		ret = s.Table + "." + seq
	}
	// The unary + keeps the status term off any index: with the status
	// bound as a parameter SQLite otherwise may walk a (status, ...) index
	// and rescan the JSON list for every row of that status, quadratic in
	// the batch; without it the only plan is the list driving primary key
	// lookups.
	return fmt.Sprintf("UPDATE %s SET %s FROM (SELECT value->>0 AS id, value->>1 AS ver FROM json_each(?)) AS v WHERE %s.%s = v.id AND %s.%s = v.ver AND +%s.%s = ? RETURNING %s.%s, %s",
		s.Table, set, s.Table, s.ID, s.Table, s.ClaimVersion, s.Table, s.Status, s.Table, s.ID, ret), args, nil
}
