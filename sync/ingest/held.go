package ingest

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// HeldLimit bounds how many held rows a scrape counts: a stall that lasts
// piles up rows, and counting them all would make every scrape slower the
// longer it lasts. A count of HeldLimit+1 means "more than HeldLimit".
const HeldLimit = 10000

// TailHeld is how far the Postgres fleet tail lags behind what is stored:
// the rows committed at or above the horizon (see TailCursor), which no
// tail sends until every transaction below them has ended.
type TailHeld struct {
	Events int64         // at most the limit asked for, plus one
	Age    time.Duration // since the oldest of them was received, by the database clock; 0 when none
	// Horizon is pg_snapshot_xmin as text: while it stays the same with
	// rows waiting, one transaction holds every tail.
	Horizon string
}

// TailHeld reads the tail's lag, counting at most limit+1 rows. The scan
// walks edge_events_tail (xid, seq) from the horizon, so it reads only
// the held rows, never the table. On SQLite there is no horizon: nothing
// is held.
func (s *Store) TailHeld(ctx context.Context, limit int) (TailHeld, error) {
	if s.db.Engine != sqldb.Postgres {
		return TailHeld{}, nil
	}
	var h TailHeld
	var age sql.NullInt64
	// received_at is the storing pod's clock (Unix µs); the age is taken
	// against the database's, the one clock every pod shares.
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*),
			(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint - MIN(received_at),
			pg_snapshot_xmin(pg_current_snapshot())::text
		FROM (SELECT received_at FROM edge_events WHERE xid >= pg_snapshot_xmin(pg_current_snapshot())
			ORDER BY xid, seq LIMIT $1) held`, limit+1).Scan(&h.Events, &age, &h.Horizon)
	if err != nil {
		return TailHeld{}, wrapTail(err)
	}
	if age.Valid && age.Int64 > 0 {
		h.Age = time.Duration(age.Int64) * time.Microsecond
	}
	return h, nil
}

// TailCollector exports the fleet tail's lag, read at each scrape with one
// bounded query (nothing polled in the background, nothing cached):
//
//	euterpe_sync_tail_held_events    rows stored but held back from the tail (HeldLimit+1: more)
//	euterpe_sync_tail_held_seconds   age of the oldest of them (0 when none)
//
// On SQLite both are 0 without a query: writers take turns, so the tail
// never waits for one, and a dashboard or alert reads the same series
// whichever engine central runs on.
type TailCollector struct {
	Store *Store
	Log   *slog.Logger

	events, age *prometheus.Desc
}

// NewTailCollector returns the collector for st.
func NewTailCollector(st *Store, log *slog.Logger) *TailCollector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &TailCollector{Store: st, Log: log,
		events: prometheus.NewDesc("euterpe_sync_tail_held_events",
			"Edge events stored but held back from the fleet tail by a transaction still open on the Postgres server (counted up to 10000; 10001 means more).", nil, nil),
		age: prometheus.NewDesc("euterpe_sync_tail_held_seconds",
			"Age of the oldest edge event held back from the fleet tail, by the database clock (0 when none).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *TailCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.age
}

// Collect implements prometheus.Collector. A failed query is reported as
// an invalid metric (that scrape omits the series) and logged.
func (c *TailCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := c.Store.TailHeld(ctx, HeldLimit)
	if err != nil {
		c.Log.Warn("metrics: reading the fleet tail's lag failed", "err", err)
		ch <- prometheus.NewInvalidMetric(c.events, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(h.Events))
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, h.Age.Seconds())
}

// Defaults of API.HeldWarnAfter and API.HeldWarnEvery.
const (
	DefaultHeldWarnAfter = time.Minute
	DefaultHeldWarnEvery = 5 * time.Minute
)

// heldWatch decides when the tails of one API warn that the horizon is
// held. It is judged by the horizon staying the same with rows waiting,
// on this process's monotonic clock, so a pod clock that differs from the
// database's (received_at is the pod's) cannot raise it.
type heldWatch struct {
	mu      sync.Mutex
	next    time.Time // no read before
	horizon string    // the horizon seen held, and since when
	since   time.Time
}

// check reads the lag at most once per every (across this API's tails)
// and logs one warning when the same horizon has held rows back for at
// least after; the next comes warnEvery later at the earliest.
func (w *heldWatch) check(ctx context.Context, st *Store, log *slog.Logger, every, after, warnEvery time.Duration) {
	if st.db.Engine != sqldb.Postgres {
		return
	}
	w.mu.Lock()
	now := time.Now()
	if now.Before(w.next) {
		w.mu.Unlock()
		return
	}
	w.next = now.Add(every)
	w.mu.Unlock()
	h, err := st.TailHeld(ctx, HeldLimit)
	if err != nil {
		return // the tail's own read reports a failing database
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now = time.Now()
	if h.Events == 0 || h.Horizon != w.horizon {
		w.horizon, w.since = "", time.Time{}
		if h.Events > 0 {
			w.horizon, w.since = h.Horizon, now
		}
		return
	}
	if now.Sub(w.since) < after {
		return
	}
	w.next = now.Add(warnEvery)
	// Which session holds it is not looked up: pg_stat_activity would show
	// another application's query text and account, which is not central's
	// to log.
	log.Warn("fleet tail held back: edge events are stored but not streamed, because a transaction that has written "+
		"is still open on the Postgres server (a session idle in transaction, or a long job of another application); "+
		"they are sent once it ends. Set idle_in_transaction_session_timeout to bound such transactions",
		"held_events", h.Events, "held_for", now.Sub(w.since).Round(time.Second).String(),
		"oldest_age", h.Age.Round(time.Second).String())
}
