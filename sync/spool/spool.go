package spool

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// File is the spool's name in the state directory.
const File = "sync.db"

// DroppedType is the only event type the budget ever drops: streamed
// output, of which a job writes many and whose loss central can record as a
// gap. Lifecycle and terminal events are what a fleet view is made of.
const DroppedType = "delta"

// rowOverhead approximates what SQLite stores per row beyond the text of
// its fields (key, size, ts, record header, index entries).
const rowOverhead = 64

// insertChunk is the most rows one INSERT statement writes (8 variables
// each, far below SQLite's limit).
const insertChunk = 64

var insertSQLs sync.Map // rows -> statement

// insertSQL is the INSERT of n rows.
func insertSQL(n int) string {
	if q, ok := insertSQLs.Load(n); ok {
		return q.(string)
	}
	q := `INSERT OR IGNORE INTO events (job_id, entry_id, type, step, task, ts, data, size) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?), ", n), ", ")
	insertSQLs.Store(n, q)
	return q
}

// Row is one spooled event, in capture order (Seq).
type Row struct {
	Seq   int64
	JobID string
	Entry string // the entry id the event had on job:{JobID}:events
	Type  string
	Step  string
	Task  string
	TS    int64
	Data  string
}

// newRow is c as the spool keeps it: its data as it will be sent. Data
// over wire.MaxDataBytes, which only a note of its size would ever leave
// the edge as, is neither stored nor counted against the budget: a
// terminal event's data is the job's whole result, and terminal events
// are never dropped, so while central is unreachable their full data
// would grow the spool past any budget.
func newRow(c jobs.Captured) Row {
	return Row{JobID: c.JobID, Entry: c.Entry, Type: c.Type, Step: c.Step, Task: c.Task, TS: c.TS,
		Data: string(wire.Sendable([]byte(c.Data)))}
}

func (r Row) size() int64 {
	return int64(len(r.JobID)+len(r.Entry)+len(r.Type)+len(r.Step)+len(r.Task)+len(r.Data)) + rowOverhead
}

// Gap is a run of events of one job dropped from the full spool.
type Gap struct {
	ID         int64
	JobID      string
	Type       string
	Count      int64
	FirstEntry string
	LastEntry  string
	FirstTS    int64
	LastTS     int64
}

// Pending is what the shipper sends next: the oldest rows and the gaps not
// yet accepted by central. Gaps handed out are sealed: later drops of the
// same job open a new gap, so a gap's id and count never change once sent.
type Pending struct {
	Rows []Row
	Gaps []Gap
}

// Empty reports whether there is nothing to send.
func (p Pending) Empty() bool { return len(p.Rows) == 0 && len(p.Gaps) == 0 }

// Stats describe the spool for metrics and the heartbeat.
type Stats struct {
	Events      int64
	Bytes       int64 // the budget's measure: the events' text plus a per-row overhead
	OldestTS    int64 // Unix ms of the oldest spooled event; 0 when empty
	Quarantined int64 // batches in the quarantine table
	// QuarantinePruned counts quarantined batches removed since Open to
	// keep the table within the spool's budget (oldest first).
	QuarantinePruned int64
	// OverBudget is how many bytes the events exceed the budget by, 0
	// within it: events the budget may not drop (lifecycle and terminal
	// ones, those in flight) kept while central is out of reach, or a
	// lowered budget not yet worked off.
	OverBudget int64
}

// Spool is an open sync.db. Its methods are safe for concurrent use; they
// take turns on the file's one connection.
type Spool struct {
	db       *sql.DB
	insFull  *sql.Stmt // the INSERT of insertChunk rows, prepared once
	path     string
	maxBytes int64
	// Now is the clock of quarantine records.
	Now func() time.Time

	mu          sync.Mutex
	events      int64 // cached totals, kept with every change under mu
	bytes       int64
	quarantined int64
	// inflight is the highest seq Next handed out: rows up to it may be on
	// their way to central and are never dropped, or central would get a
	// gap for events it also received. It is kept in the inflight table
	// too: central may have stored the batch just before a crash, so the
	// protection must outlive the process.
	inflight int64
	tombs    int64 // rows in the tombstones table (0 spares Add a query)
	// dataVersion is SQLite's data_version as this connection last read
	// it: it changes when another connection commits to the file (an
	// operator's `euterpe-edge sync quarantine resend` beside the daemon),
	// and then the cached totals are read from the file again.
	dataVersion int64
	// settled names tombstones whose entries Moved reported gone from the
	// capture stream (settleAll: every one); the next Add deletes them.
	settled   []entryKey
	settleAll bool
	// stats is what Stats answers: the totals as of the last commit that
	// changed them, so /metrics and the heartbeat never wait on mu behind
	// a long transaction.
	stats   atomic.Pointer[Stats]
	closed  atomic.Bool
	dropped atomic.Int64 // delta events dropped since Open
	pruned  atomic.Int64 // quarantined batches pruned since Open
	aside   string       // where Open moved a corrupt file
}

// Open opens (creating) the spool at path with a budget of maxBytes.
// The file is synchronous=FULL: the shipper deletes events from Redis as
// soon as the transaction that spooled them commits, so a commit must
// survive a power cut, not only a crash of the process.
func Open(ctx context.Context, path string, maxBytes int64) (*Spool, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("spool %s: budget %d must be positive", path, maxBytes)
	}
	s, err := open(ctx, path, maxBytes, asDaemon)
	if err == nil || !Corrupt(err) {
		return s, err
	}
	aside, aerr := MoveAside(path, "corrupt", time.Now())
	if aerr != nil {
		return nil, fmt.Errorf("%w; %w", err, aerr)
	}
	if s, err = open(ctx, path, maxBytes, asDaemon); err != nil {
		return nil, err
	}
	s.aside = aside
	return s, nil
}

// access is who opens the file, and so what the open may do to it.
type access int

const (
	// asDaemon creates the file or brings its schema up to date, checks
	// every page and records the daemon's budget.
	asDaemon access = iota
	// asOperator opens a file the daemon has brought up to date, to
	// write to it, and changes nothing on open.
	asOperator
	// asReader is asOperator that cannot write.
	asReader
)

func open(ctx context.Context, path string, maxBytes int64, a access) (*Spool, error) {
	if err := private(path); err != nil {
		return nil, fmt.Errorf("spool %s: %w", path, err)
	}
	pragmas := []string{"synchronous(FULL)", "cache_size(-256)"}
	if a != asDaemon {
		pragmas = append(pragmas, operatorBusy)
	}
	if a == asReader {
		pragmas = append(pragmas, "query_only(1)")
	}
	dsn := sqldb.SQLiteDSN(path, pragmas...)
	if a != asDaemon {
		dsn += "&mode=rw" // never create a file, whatever happened since the caller looked
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", path, err)
	}
	// One connection: the spool's work is a serial loop, and one cache
	// keeps the file's memory cost small next to the daemon's.
	db.SetMaxOpenConns(1)
	db.SetConnMaxIdleTime(0)
	s := &Spool{db: db, path: path, maxBytes: maxBytes, Now: time.Now}
	if err := s.init(ctx, a); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("spool %s: %w", path, err)
	}
	return s, nil
}

func (s *Spool) init(ctx context.Context, a access) error {
	if a == asDaemon {
		if _, err := s.db.ExecContext(ctx, schema); err != nil {
			return err
		}
		// Every page, not only those the open reads: a spool whose damage
		// only a later Add or Next would meet is set aside now, not
		// retried for ever. The file is the budget's size at most, read
		// once per start.
		if err := checkIntegrity(ctx, s.db); err != nil {
			return err
		}
		if _, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO budget (id, max_bytes) VALUES (1, ?)`, s.maxBytes); err != nil {
			return err
		}
	} else if err := s.adoptDaemons(ctx); err != nil {
		return err
	}
	ins, err := s.db.PrepareContext(ctx, insertSQL(insertChunk))
	if err != nil {
		return err
	}
	s.insFull = ins
	narrow(s.path)
	// Read before the totals: a commit by another connection in between
	// changes it, and the first transaction counts again.
	if err := s.db.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&s.dataVersion); err != nil {
		return err
	}
	err = s.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0), (SELECT COUNT(*) FROM quarantine),
  (SELECT COALESCE(MAX(seq), 0) FROM inflight), (SELECT COUNT(*) FROM tombstones) FROM events`).
		Scan(&s.events, &s.bytes, &s.quarantined, &s.inflight, &s.tombs)
	if err != nil {
		return err
	}
	oldest, err := oldestTS(ctx, s.db)
	if err != nil {
		return err
	}
	s.publish(oldest)
	return nil
}

// oldestTS is the time of the oldest spooled event, 0 when there is none.
func oldestTS(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int64, error) {
	var ts int64
	err := q.QueryRowContext(ctx, `SELECT ts FROM events ORDER BY seq LIMIT 1`).Scan(&ts)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return ts, err
}

// publish makes the cached totals, with oldest, what Stats answers. The
// caller holds mu (or has not shared s yet).
func (s *Spool) publish(oldest int64) {
	s.stats.Store(&Stats{Events: s.events, Bytes: s.bytes, OldestTS: oldest, OverBudget: max(0, s.bytes-s.maxBytes), Quarantined: s.quarantined})
}

// private makes the spool's files the daemon's user's only: they hold job
// data. SQLite creates the WAL and shared-memory files with the mode of
// the database file, so a missing database file is created 0600 first
// (whatever the umask); files an older edge left readable are narrowed. A
// path that exists, even as a link to nowhere, is left for SQLite to open
// or refuse.
func private(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if f != nil {
			_ = f.Close()
		}
	}
	narrow(path)
	return nil
}

// narrow sets the spool's files that exist to 0600. Open calls it again
// once the schema is written: a file SQLite created itself (through a
// link) and its WAL got the umask's mode.
func narrow(path string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Chmod(path+suffix, 0o600)
	}
}

// ErrClosed is returned by Stats once the spool is closed.
var ErrClosed = errors.New("spool is closed")

// Close closes the file.
func (s *Spool) Close() error {
	s.closed.Store(true)
	if s.insFull != nil {
		_ = s.insFull.Close()
	}
	return s.db.Close()
}

// Path is the file's path.
func (s *Spool) Path() string { return s.path }

// Dropped is how many delta events the budget dropped since Open.
func (s *Spool) Dropped() int64 { return s.dropped.Load() }

// QuarantinePruned is how many quarantined batches were removed since Open
// to keep the quarantine within the budget.
func (s *Spool) QuarantinePruned() int64 { return s.pruned.Load() }

// AddResult reports what an Add did.
type AddResult struct {
	Added   int // new rows (a capture entry already spooled, or dropped by an earlier move of it, is skipped)
	Dropped int // delta events dropped to stay within the budget
	// Over is the bytes still over the budget when only undroppable
	// events are left. A spool over its budget by more than one Add drops
	// (a budget lowered at restart) reports 0 and is worked off by the
	// following moves.
	Over int64
}

// Add spools captured events in one transaction, in the order given (the
// capture order), then drops the oldest delta events not in flight while
// the spool is over its budget (at most dropBatch more than it spooled),
// recording each drop in its job's open gap.
// Every capture of caps is tombstoned in the same transaction, and a
// tombstoned capture is skipped, so a move repeated before its XDEL
// succeeded (the XDEL failed, the edge died) spools nothing again, neither
// what the sender shipped since nor what the budget dropped. When Add
// returns nil the events are durable and may leave Redis; once they have,
// call Moved.
func (s *Spool) Add(ctx context.Context, caps []jobs.Captured) (AddResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var res AddResult
	var events, bytes, tombs, oldest int64
	err := sqldb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		res = AddResult{}
		if err := s.refresh(ctx, tx); err != nil {
			return err
		}
		events, bytes = s.events, s.bytes
		var err error
		if tombs, err = s.settle(ctx, tx, s.tombs); err != nil {
			return err
		}
		fresh, err := s.skipTombstoned(ctx, tx, caps, tombs)
		if err != nil {
			return err
		}
		buried, err := s.bury(ctx, tx, caps)
		if err != nil {
			return err
		}
		tombs += buried
		// Multi-row INSERTs: one statement per insertChunk rows costs a
		// fraction of one per row, which matters while workers burn down.
		recount := false
		for i := 0; i < len(fresh); i += insertChunk {
			chunk := fresh[i:min(i+insertChunk, len(fresh))]
			args := make([]any, 0, len(chunk)*8)
			var size int64
			for _, c := range chunk {
				r := newRow(c)
				args = append(args, r.JobID, r.Entry, r.Type, r.Step, r.Task, r.TS, r.Data, r.size())
				size += r.size()
			}
			var out sql.Result
			if len(chunk) == insertChunk {
				out, err = tx.StmtContext(ctx, s.insFull).ExecContext(ctx, args...)
			} else {
				out, err = tx.ExecContext(ctx, insertSQL(len(chunk)), args...)
			}
			if err != nil {
				return fmt.Errorf("spool %d events: %w", len(chunk), err)
			}
			n, _ := out.RowsAffected()
			res.Added += int(n)
			if int(n) == len(chunk) {
				events += n
				bytes += size
			} else {
				recount = true // some were spooled already (a spool file from before tombstones of every capture)
			}
		}
		if recount {
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0) FROM events`).Scan(&events, &bytes); err != nil {
				return err
			}
		}
		var d dropper
		if err := s.dropOver(ctx, tx, bytes, dropBatch+len(fresh), &d); err != nil {
			return err
		}
		res.Dropped, events, bytes = d.dropped, events-int64(d.dropped), bytes-d.freed
		if bytes > s.maxBytes && d.exhausted {
			res.Over = bytes - s.maxBytes
		}
		oldest, err = oldestTS(ctx, tx)
		return err
	})
	if err != nil {
		return AddResult{}, err
	}
	s.events, s.bytes, s.tombs = events, bytes, tombs
	s.settled, s.settleAll = nil, false
	s.dropped.Add(int64(res.Dropped))
	s.publish(oldest)
	return res, nil
}

// Next returns up to maxRows of the oldest events, stopping before their
// sizes add up past maxBytes (one row at least), and up to maxGaps gaps
// (sealing them), and protects the rows from being dropped until the next
// call: the shipper sends one Pending at a time and asks for the next one
// only when it is done with this one.
func (s *Spool) Next(ctx context.Context, maxRows, maxGaps int, maxBytes int64) (Pending, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p Pending
	var top int64
	err := sqldb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		p, top = Pending{}, 0
		// The sender calls Next every second while idle: totals another
		// process changed are what Stats answers within that second.
		if err := s.refresh(ctx, tx); err != nil {
			return err
		}
		rs, err := tx.QueryContext(ctx, `SELECT seq, job_id, entry_id, type, step, task, ts, data, size FROM events ORDER BY seq LIMIT ?`, maxRows)
		if err != nil {
			return err
		}
		var total int64
		for rs.Next() {
			var r Row
			var size int64
			if err := rs.Scan(&r.Seq, &r.JobID, &r.Entry, &r.Type, &r.Step, &r.Task, &r.TS, &r.Data, &size); err != nil {
				rs.Close()
				return err
			}
			if total += size; total > maxBytes && len(p.Rows) > 0 {
				break
			}
			p.Rows = append(p.Rows, r)
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return err
		}
		if n := len(p.Rows); n > 0 {
			top = p.Rows[n-1].Seq
		}
		if err := s.setInflight(ctx, tx, top); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE gaps SET sealed = 1 WHERE sealed = 0`); err != nil {
			return err
		}
		gs, err := tx.QueryContext(ctx, `SELECT id, job_id, type, count, first_entry_id, last_entry_id, first_ts, last_ts FROM gaps ORDER BY id LIMIT ?`, maxGaps)
		if err != nil {
			return err
		}
		defer gs.Close()
		for gs.Next() {
			var g Gap
			if err := gs.Scan(&g.ID, &g.JobID, &g.Type, &g.Count, &g.FirstEntry, &g.LastEntry, &g.FirstTS, &g.LastTS); err != nil {
				return err
			}
			p.Gaps = append(p.Gaps, g)
		}
		return gs.Err()
	})
	if err != nil {
		return Pending{}, fmt.Errorf("spool next: %w", err)
	}
	s.inflight = top
	return p, nil
}

// setInflight records top as the in-flight marker in tx, writing only
// when it changes: an idle sender calls Next every second.
func (s *Spool) setInflight(ctx context.Context, tx *sql.Tx, top int64) error {
	if top == s.inflight {
		return nil
	}
	if top == 0 {
		_, err := tx.ExecContext(ctx, `DELETE FROM inflight`)
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO inflight (id, seq) VALUES (1, ?)`, top)
	return err
}

// Ack deletes what central accepted: p's gaps, and every row from p's first
// to its last seq, so p.Rows must be a run of consecutive rows of one Next
// (the shipper splits a Next only into such runs). Rows of that Next that
// p leaves stay in flight, protected from the budget, until they are
// settled or the next Next hands them out again: an earlier attempt of a
// larger part of it (one that timed out, then halved) may have carried
// them to central. Once none is left nothing is in flight.
func (s *Spool) Ack(ctx context.Context, p Pending) error {
	return s.remove(ctx, p, nil)
}

// Quarantined is a batch central refused for good (400, 413), or events
// the edge itself cannot send; kept for an operator, never retried.
type Quarantined struct {
	Status  int    // HTTP status, 0 when refused by the edge itself
	Code    string // central's error code, or the edge's reason
	Message string
	Body    []byte // the batch as encoded (uncompressed JSON)
}

// Quarantine moves p into the quarantine table in one transaction; like
// Ack, it ends the batch in flight once no row of it is left.
func (s *Spool) Quarantine(ctx context.Context, p Pending, q Quarantined) error {
	return s.remove(ctx, p, &q)
}

func (s *Spool) remove(ctx context.Context, p Pending, q *Quarantined) error {
	if p.Empty() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var freed, n, pruned, keep, oldest int64
	err := sqldb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		freed, n, pruned, keep = 0, 0, 0, s.inflight
		if err := s.refresh(ctx, tx); err != nil {
			return err
		}
		if q != nil {
			if _, err := tx.ExecContext(ctx, `INSERT INTO quarantine (at_ms, status, code, message, events, gaps, body) VALUES (?, ?, ?, ?, ?, ?, ?)`,
				s.Now().UnixMilli(), q.Status, q.Code, daemon.CapMessage(q.Message), len(p.Rows), len(p.Gaps), string(q.Body)); err != nil {
				return err
			}
			var err error
			if pruned, err = s.pruneQuarantine(ctx, tx); err != nil {
				return err
			}
		}
		if k := len(p.Rows); k > 0 {
			lo, hi := p.Rows[0].Seq, p.Rows[k-1].Seq
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0) FROM events WHERE seq BETWEEN ? AND ?`, lo, hi).Scan(&n, &freed); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM events WHERE seq BETWEEN ? AND ?`, lo, hi); err != nil {
				return err
			}
		}
		for _, g := range p.Gaps {
			if _, err := tx.ExecContext(ctx, `DELETE FROM gaps WHERE id = ?`, g.ID); err != nil {
				return err
			}
		}
		// Rows of the last Next that p leaves may have reached central
		// with an attempt never answered (one that timed out, after which
		// the sender halved the batch): dropped now, central would have
		// them and count them in a gap. They stay in flight until settled
		// or handed out again by the next Next.
		if keep > 0 {
			var left bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM events WHERE seq <= ?)`, keep).Scan(&left); err != nil {
				return err
			}
			if !left {
				keep = 0
			}
		}
		if err := s.setInflight(ctx, tx, keep); err != nil {
			return err
		}
		var err error
		oldest, err = oldestTS(ctx, tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("spool remove: %w", err)
	}
	s.events -= n
	s.bytes -= freed
	s.inflight = keep
	if q != nil {
		s.quarantined += 1 - pruned
		s.pruned.Add(pruned)
	}
	s.publish(oldest)
	return nil
}

// pruneQuarantine keeps the quarantined bodies within the spool's budget,
// removing the oldest batches first and never the newest. Quarantine is
// for good and outside the events' budget: a central refusing every batch
// (one too old for what the edge sends, say) would otherwise move the
// whole stream into it and fill the disk.
func (s *Spool) pruneQuarantine(ctx context.Context, tx *sql.Tx) (int64, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM quarantine WHERE id IN (
  SELECT id FROM (SELECT id, SUM(length(CAST(body AS BLOB))) OVER (ORDER BY id DESC) AS newer FROM quarantine)
  WHERE newer > ? AND id < (SELECT MAX(id) FROM quarantine))`, s.maxBytes)
	if err != nil {
		return 0, fmt.Errorf("prune the quarantine: %w", err)
	}
	return res.RowsAffected()
}

// Stats returns the spool's totals as of the last committed change, or
// ErrClosed. It reads no file and takes no lock, so it answers at once even
// while an Add or a send holds the spool; the context is not needed.
func (s *Spool) Stats(context.Context) (Stats, error) {
	if s.closed.Load() {
		return Stats{}, fmt.Errorf("spool stats: %w", ErrClosed)
	}
	st := *s.stats.Load()
	st.QuarantinePruned = s.pruned.Load()
	return st, nil
}

// QuarantinedBatch is one row of the quarantine table.
type QuarantinedBatch struct {
	ID     int64
	AtMS   int64
	Status int
	Code   string
	// Message is central's answer (or the edge's reason), as stored:
	// capped at 512 bytes.
	Message string
	Events  int
	Gaps    int
	Body    string
}

// QuarantineList returns the quarantined batches, oldest first.
func (s *Spool) QuarantineList(ctx context.Context) ([]QuarantinedBatch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, err := s.db.QueryContext(ctx, `SELECT id, at_ms, status, code, message, events, gaps, body FROM quarantine ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []QuarantinedBatch
	for rs.Next() {
		var q QuarantinedBatch
		if err := rs.Scan(&q.ID, &q.AtMS, &q.Status, &q.Code, &q.Message, &q.Events, &q.Gaps, &q.Body); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rs.Err()
}

// SetAside is where Open moved a corrupt spool file; "" when it did not.
func (s *Spool) SetAside() string { return s.aside }
