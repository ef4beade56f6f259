package ship

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Config is what a Shipper needs. URL, EdgeID and Secret are required.
type Config struct {
	// URL is central's base URL; the wire paths are appended to it.
	URL    string
	EdgeID string
	Secret []byte
	// BackoffBase and BackoffMax bound the exponential backoff after
	// network errors and 5xx; BackoffMax is also the slow retry period
	// after a 401/403 that is not clock skew.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Heartbeat is the status period; 0 sends none.
	Heartbeat time.Duration
	// Poll is how long the mover waits when the capture stream is empty.
	Poll time.Duration
	// MoveBatch is the most capture entries moved per spool transaction.
	MoveBatch int64
	// Client sends the requests; nil uses one with a 30 s timeout.
	Client *http.Client
	// Now is the edge's clock (tests move it); the signing clock is Now
	// plus the offset learnt from central's Date header.
	Now func() time.Time
	// Status fills the heartbeat's edge-wide fields (workers, backlog,
	// library…); the shipper adds its own spool figures.
	Status func(ctx context.Context) wire.Status
	// Rand, when set, replaces the backoff's jitter source (tests).
	Rand func() float64
	// Busy reports whether the edge's workers have work; nil reads the
	// backlog of jobs:stream (undelivered or running entries).
	Busy func(ctx context.Context) (bool, error)
	// YieldPace is how often the mover and the sender each take one batch
	// while Busy says the workers have work; they go at full speed when
	// the edge is idle. 0 is DefaultYieldPace; negative never yields.
	YieldPace time.Duration
	// YieldCeiling is the length of the capture stream past which the
	// mover moves at full speed even while the workers are busy, so Redis
	// memory stays bounded. 0 is DefaultYieldCeiling.
	YieldCeiling int64
}

func (c *Config) defaults() {
	if c.BackoffBase <= 0 {
		c.BackoffBase = 500 * time.Millisecond
	}
	if c.BackoffMax < c.BackoffBase {
		c.BackoffMax = c.BackoffBase
	}
	if c.Poll <= 0 {
		c.Poll = 200 * time.Millisecond
	}
	if c.MoveBatch <= 0 {
		c.MoveBatch = 500
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if c.Client.CheckRedirect == nil {
		// A redirect would carry the signed request and its x-euterpe-*
		// headers to another host, which could replay them to central
		// within the skew window; the 3xx is answered like any refusal.
		cl := *c.Client
		cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		c.Client = &cl
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.YieldPace == 0 {
		c.YieldPace = DefaultYieldPace
	}
	if c.YieldCeiling <= 0 {
		c.YieldCeiling = DefaultYieldCeiling
	}
	c.URL = strings.TrimRight(c.URL, "/")
}

// Shipper moves, ships and reports; Run owns its goroutines.
type Shipper struct {
	cfg Config
	log *slog.Logger
	rdb redis.UniversalClient
	// sp is the spool, nil until open succeeds; the heartbeat and
	// /metrics read it while Run is still opening it.
	sp   atomic.Pointer[spool.Spool]
	open func(context.Context) (*spool.Spool, error) // nil: sp was given to New

	backoff lease.Backoff
	offset  atomic.Int64 // signing clock correction, nanoseconds

	shipped     atomic.Int64 // events central accepted since start
	quarantined atomic.Int64 // batches quarantined since start
	gapsSent    atomic.Int64
	started     time.Time   // process clock, for the uptime
	yielding    atomic.Bool // the edge was busy at the last check

	// redisDropped is the capture cap's drop count the last heartbeat
	// read; olderCentral (Unix ns, Config.Now) is until when heartbeats
	// leave it out because central refused it (see SendHeartbeat).
	redisDropped atomic.Int64
	olderCentral atomic.Int64

	// moveMu serialises moves; unmoved is a move whose XDEL failed: its
	// entries are in the spool and maybe still on the capture stream.
	moveMu  sync.Mutex
	unmoved *pendingMove

	// wake nudges the sender after the mover spooled something.
	wake chan struct{}
	// corrupt tells Run that a statement found the spool it opened
	// corrupt (spoolFailed).
	corrupt chan struct{}
	state   sendState // the send loop's; SendOnce (tests) shares it

	gzMu sync.Mutex
	gz   *gzip.Writer // reused by compress

	logMu  sync.Mutex
	logged map[string]bool // conditions already logged, until they clear
}

// ErrConfig is matched by New's refusals of its Config.
var ErrConfig = errors.New("sync: invalid shipper configuration")

// ErrNoSpool is matched when the spool is not open yet.
var ErrNoSpool = errors.New("sync: the spool is not open")

// New returns a Shipper moving from rdb's capture stream into sp and
// shipping to cfg.URL; the caller closes sp after Run.
func New(log *slog.Logger, rdb redis.UniversalClient, sp *spool.Spool, cfg Config) (*Shipper, error) {
	s, err := newShipper(log, rdb, cfg)
	if err != nil {
		return nil, err
	}
	s.setSpool(sp)
	return s, nil
}

// NewOpening is New with a spool that Run opens with open, and closes
// when it returns. The spool is bound to Config.EdgeID: one whose events
// were captured under another id is set aside, not shipped (bind). A spool that cannot be opened (a full disk, a read-only
// or missing state directory) does not stop the edge: Run logs it once at
// error level and retries with backoff, the heartbeat goes on, captured
// events wait on the capture stream in Redis, and moving and shipping
// start once it opens.
func NewOpening(log *slog.Logger, rdb redis.UniversalClient, open func(context.Context) (*spool.Spool, error), cfg Config) (*Shipper, error) {
	s, err := newShipper(log, rdb, cfg)
	if err != nil {
		return nil, err
	}
	s.open = open
	return s, nil
}

func newShipper(log *slog.Logger, rdb redis.UniversalClient, cfg Config) (*Shipper, error) {
	if log == nil {
		log = slog.Default()
	}
	cfg.defaults()
	if cfg.Busy == nil {
		cfg.Busy = busyBacklog(jobs.NewStore(rdb))
	}
	switch {
	case cfg.URL == "":
		return nil, fmt.Errorf("%w: no central URL", ErrConfig)
	case cfg.EdgeID == "":
		return nil, fmt.Errorf("%w: no edge id", ErrConfig)
	case wire.CheckEdgeID(cfg.EdgeID) != nil:
		// Every batch and heartbeat would be refused for it: say so now
		// instead of spooling for a central that never takes them. The id
		// is not echoed: it can be anything, of any length.
		return nil, fmt.Errorf("%w: edge id of %d bytes: %w", ErrConfig, len(cfg.EdgeID), wire.CheckEdgeID(cfg.EdgeID))
	case len(cfg.Secret) == 0:
		return nil, fmt.Errorf("%w: no secret", ErrConfig)
	}
	return &Shipper{
		cfg: cfg, log: log, rdb: rdb,
		backoff: lease.Backoff{Base: cfg.BackoffBase, Cap: cfg.BackoffMax, Rand: cfg.Rand},
		started: time.Now(), wake: make(chan struct{}, 1), corrupt: make(chan struct{}, 1), logged: map[string]bool{},
	}, nil
}

func (s *Shipper) setSpool(sp *spool.Spool) {
	s.sp.Store(sp)
	s.corruptSetAside(sp)
}

// corruptSetAside logs a corrupt file spool.Open set aside for sp.
func (s *Shipper) corruptSetAside(sp *spool.Spool) {
	if aside := sp.SetAside(); aside != "" {
		s.log.Error("sync: the spool file was corrupt; it is set aside and an empty spool took its place: the events in it are not shipped",
			"spool", sp.Path(), "set_aside", aside)
	}
}

// Run moves, ships and sends heartbeats until ctx ends; it returns nil
// then. A spool NewOpening was given the opener of is opened first (the
// heartbeat runs meanwhile) and closed when Run returns.
func (s *Shipper) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if s.cfg.Heartbeat > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.heartbeatLoop(ctx)
		}()
	}
	var err error
	if s.open == nil {
		s.runLoops(ctx)
	} else if s.openSpool(ctx) {
		for s.runLoops(ctx) {
			if !s.replaceCorrupt(ctx) {
				break
			}
		}
	}
	wg.Wait()
	if sp := s.Spool(); s.open != nil && sp != nil {
		err = sp.Close()
	}
	return err
}

// runLoops runs the mover and the sender until ctx ends (false) or a
// statement finds the spool Run opened corrupt (true). Both have stopped
// when it returns, so the spool can be replaced under neither: a batch
// read from one spool is never acknowledged in another.
func (s *Shipper) runLoops(ctx context.Context) bool {
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){s.moveLoop, s.sendLoop} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(lctx)
		}()
	}
	corrupt := false
	select {
	case <-ctx.Done():
	case <-s.corrupt:
		corrupt = true
	}
	stop()
	wg.Wait()
	return corrupt && ctx.Err() == nil
}

// spoolFailed is told of every error of a spool operation. One that says
// the file is corrupt (pages damaged while the edge runs: a failing card)
// fails the same way on every retry, so Run replaces the spool instead; a
// spool given to New is the caller's and is only retried.
func (s *Shipper) spoolFailed(err error) {
	if s.open == nil || !spool.Corrupt(err) {
		return
	}
	select {
	case s.corrupt <- struct{}{}:
	default:
	}
}

// replaceCorrupt sets aside the spool a statement found corrupt, as Open
// sets aside one it finds corrupt at start, and opens an empty one in its
// place; false when ctx ended first. The events in it are not shipped. A
// move whose XDEL is pending is forgotten: its entries, still on the
// capture stream, are moved again into the new spool rather than deleted
// from Redis with the old one set aside.
func (s *Shipper) replaceCorrupt(ctx context.Context) bool {
	sp := s.sp.Swap(nil)
	path := sp.Path()
	_ = sp.Close()
	s.moveMu.Lock()
	s.unmoved = nil
	s.moveMu.Unlock()
	select {
	case <-s.corrupt:
	default:
	}
	if aside, err := spool.MoveAside(path, "corrupt", s.cfg.Now()); err != nil {
		// Open checks every page: if it finds the damage, it sets the file
		// aside itself.
		s.log.Error("sync: the spool file became corrupt while running and cannot be set aside; opening it again", "spool", path, "err", err)
	} else {
		s.log.Error("sync: the spool file became corrupt while running; it is set aside and an empty spool took its place: the events in it are not shipped",
			"spool", path, "set_aside", aside)
	}
	s.clear("move", "spool", "record", "moved")
	return s.openSpool(ctx)
}

// openSpool opens the spool, bound to Config.EdgeID (bind), retrying with
// backoff until it opens or ctx ends (false). The failure is logged once:
// it lasts as long as the disk stays full, and the capture stream in Redis
// holds the events meanwhile.
func (s *Shipper) openSpool(ctx context.Context) bool {
	for failures := 1; ; failures++ {
		sp, err := s.open(ctx)
		if err == nil {
			s.corruptSetAside(sp)
			sp, err = s.bind(ctx, sp)
		}
		if err == nil {
			s.sp.Store(sp)
			if failures > 1 {
				s.log.Info("sync: the spool is open; moving and shipping start", "spool", sp.Path())
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.once("open", func() {
			s.log.Error("sync: cannot open the spool; jobs run as usual, captured events wait in Redis (sync:events) and shipping starts once it opens; retrying with backoff",
				"err", daemon.CapMessage(err.Error()))
		})
		// Shutdown during the wait ends it: another attempt would touch
		// the state directory on the way out, maybe a card being unmounted.
		if !daemon.Sleep(ctx, s.backoff.Delay(failures)) {
			return false
		}
	}
}

// Shipped, Quarantined and GapsSent count since start (metrics).
func (s *Shipper) Shipped() int64     { return s.shipped.Load() }
func (s *Shipper) Quarantined() int64 { return s.quarantined.Load() }
func (s *Shipper) GapsSent() int64    { return s.gapsSent.Load() }

// Spool is the shipper's spool; nil while NewOpening's is not open yet.
func (s *Shipper) Spool() *spool.Spool { return s.sp.Load() }

// signNow is the signing clock: the edge's clock corrected by central's.
func (s *Shipper) signNow() time.Time {
	return s.cfg.Now().Add(time.Duration(s.offset.Load()))
}

// once logs a condition the first time it is seen, until clear(key).
func (s *Shipper) once(key string, f func()) {
	s.logMu.Lock()
	seen := s.logged[key]
	s.logged[key] = true
	s.logMu.Unlock()
	if !seen {
		f()
	}
}

func (s *Shipper) clear(keys ...string) {
	s.logMu.Lock()
	for _, k := range keys {
		delete(s.logged, k)
	}
	s.logMu.Unlock()
}

// moved reports the entries of a move whose XDEL succeeded (drained: the
// move read the whole stream), so the spool forgets their tombstones. The
// move is complete either way: a tombstone left by a failure here can
// never match a capture entry again, and the next move that reads the
// whole stream clears it.
func (s *Shipper) moved(ctx context.Context, caps []jobs.Captured, drained bool) {
	if err := s.Spool().Moved(ctx, caps, drained); err != nil {
		s.spoolFailed(err)
		s.once("moved", func() { s.log.Warn("sync: cannot clear the spool's tombstones of moved events", "err", err) })
	} else {
		s.clear("moved")
	}
}

// moveLoop drains the capture stream into the spool: at full speed while
// the edge is idle, one batch per YieldPace while its workers are busy
// (unless the stream is past YieldCeiling).
func (s *Shipper) moveLoop(ctx context.Context) {
	failures := 0
	y := &yielder{s: s}
	for y.wait(ctx, s.overCeiling) {
		n, err := s.MoveOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			failures++
			s.spoolFailed(err)
			s.once("move", func() { s.log.Warn("sync: cannot move captured events to the spool; retrying", "err", err) })
			daemon.Sleep(ctx, s.backoff.Delay(failures))
		case err == nil && int64(n) < s.cfg.MoveBatch:
			failures = 0
			s.clear("move")
			daemon.Sleep(ctx, s.cfg.Poll)
		default:
			failures = 0
		}
	}
}

// MoveOnce moves up to MoveBatch captured events into the spool and then
// deletes them from Redis. A crash between the two leaves them in both;
// the spool tombstones every capture it takes in the same transaction, so
// the next move skips them (and deletes them from Redis) whether they are
// still spooled, shipped since or dropped. It returns how many entries it
// read.
//
// A move whose XDEL failed is finished first, before anything is read:
// the sender may have shipped its events meanwhile, and reading them
// again would spool them a second time — shipped twice, and, once the
// budget drops them, counted in a gap of events central has.
func (s *Shipper) MoveOnce(ctx context.Context) (int, error) {
	if s.Spool() == nil {
		return 0, ErrNoSpool
	}
	s.moveMu.Lock()
	defer s.moveMu.Unlock()
	if m := s.unmoved; m != nil {
		if err := s.finishMove(ctx, *m); err != nil {
			return 0, err
		}
		s.unmoved = nil
	}
	// The capture cap's drops are recorded on their own: failing to
	// record them must not keep the mover from emptying the stream, or
	// the cap would drop more.
	if err := s.recordDrops(ctx); err != nil && ctx.Err() == nil {
		s.once("redisdropfail", func() {
			s.log.Warn("sync: cannot record the deltas the capture stream's cap dropped; retrying", "err", err)
		})
	} else if err == nil {
		s.clear("redisdropfail")
	}
	msgs, err := s.rdb.XRangeN(ctx, jobs.CaptureStream, "-", "+", s.cfg.MoveBatch).Result()
	if err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		// Nothing is on the stream, so no tombstone can match any more.
		s.moved(ctx, nil, true)
		return 0, nil
	}
	caps := make([]jobs.Captured, len(msgs))
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		caps[i] = jobs.CapturedFromValues(m.ID, m.Values)
		ids[i] = m.ID
	}
	res, err := s.Spool().Add(ctx, caps)
	if err != nil {
		return 0, err
	}
	if res.Dropped > 0 {
		s.once("drop", func() {
			s.log.Warn("sync: spool full, dropping the oldest delta events (gaps are reported to central)",
				"spool", s.Spool().Path(), "dropped", res.Dropped)
		})
	} else {
		s.clear("drop")
	}
	if res.Over > 0 {
		s.once("over", func() {
			s.log.Warn("sync: spool over its budget with only lifecycle and terminal events left; keeping them",
				"over_bytes", res.Over)
		})
	} else {
		s.clear("over")
	}
	m := pendingMove{ids: ids, caps: caps, drained: int64(len(msgs)) < s.cfg.MoveBatch}
	if err := s.finishMove(ctx, m); err != nil {
		s.unmoved = &m
		return 0, err
	}
	return len(msgs), nil
}

// pendingMove is a move spooled and not yet deleted from the stream.
type pendingMove struct {
	ids     []string
	caps    []jobs.Captured
	drained bool // the move read the whole stream
}

// finishMove deletes a spooled move's entries from the capture stream.
// The spool holds them: it finishes even when shutdown began, or the next
// start would move (and ship) them a second time.
func (s *Shipper) finishMove(ctx context.Context, m pendingMove) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.rdb.XDel(dctx, jobs.CaptureStream, m.ids...).Err(); err != nil {
		return fmt.Errorf("delete moved capture entries: %w", err)
	}
	s.moved(dctx, m.caps, m.drained)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}
