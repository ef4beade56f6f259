package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Reasons a subscription ends before its job does.
var (
	ErrHubClosed = errors.New("event hub shut down")
	ErrLagged    = errors.New("subscriber fell behind")
	// ErrNotStream: the job's events key holds something other than a
	// stream, so no XREAD or XRANGE of it can succeed.
	ErrNotStream = errors.New("job events key is not a stream")
)

const (
	subBuffer    = 256
	readCount    = 256
	readBlock    = 2 * time.Second
	unblockTries = 50
	// At shutdown the unblock is retried longer: a miss holds every open
	// stream, and the stop, for the rest of readBlock.
	shutdownUnblockTries = 250

	retryMin = 250 * time.Millisecond // first pause after a failed read
	retryMax = 5 * time.Second        // longest pause while reads keep failing
)

// Hub is the shared fan-out reader of job event streams. One goroutine
// (Run) holds one dedicated Redis connection and XREADs every subscribed
// stream in one blocking call.
type Hub struct {
	log      *slog.Logger
	reader   *redis.Client         // PoolSize 1: the blocking connection
	ctl      redis.UniversalClient // shared pool, for CLIENT UNBLOCK
	readerID atomic.Int64
	block    time.Duration // of each XREAD: readBlock, or the settings' (tests)

	mu      sync.Mutex
	feeds   map[string]*feed
	closed  bool
	blocked bool   // the reader is inside XREAD with snapGen
	gen     uint64 // bumped when a feed is added
	snapGen uint64
	wake    chan struct{}
}

type feed struct {
	cursor jobs.StreamID // last id the reader saw for this stream
	subs   map[*Sub]struct{}
}

// Sub is one subscriber of one job's events.
type Sub struct {
	Job string
	// CatchUpTo, when not zero, is the reader's cursor at subscription: the
	// subscriber must fetch (after, CatchUpTo] itself before reading C.
	CatchUpTo jobs.StreamID
	C         <-chan *Entry
	c         chan *Entry
	err       error
}

// Entry is one event as the hub hands it to every subscriber of its job.
// They share it, and its SSE frame with it: a done event carries the
// job's whole result, many MiB, which each stream would otherwise encode
// and copy again.
type Entry struct {
	jobs.Event
	once  sync.Once
	frame []byte
}

// Err says why C was closed: ErrHubClosed, ErrLagged or ErrNotStream (nil
// after Unsubscribe).
func (s *Sub) Err() error { return s.err }

// NewHub returns a hub reading through a dedicated client built from opt
// (PoolSize forced to 1); ctl is the shared client used to interrupt the
// reader's blocking call when a new stream must join it.
func NewHub(log *slog.Logger, opt *redis.Options, ctl redis.UniversalClient) *Hub {
	o := *opt
	o.PoolSize = 1
	o.MinIdleConns = 0
	o.MaxIdleConns = 1
	o.ClientName = "sse-reader"
	if opt.ClientName != "" {
		o.ClientName = opt.ClientName + "-sse"
	}
	h := &Hub{log: log, ctl: ctl, block: readBlock, feeds: map[string]*feed{}, wake: make(chan struct{}, 1)}
	o.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		id, err := cn.ClientID(ctx).Result()
		if err == nil {
			h.readerID.Store(id)
		}
		if opt.OnConnect != nil {
			return opt.OnConnect(ctx, cn)
		}
		return nil
	}
	h.reader = redis.NewClient(&o)
	return h
}

// Subscribe registers interest in job's events after the stream id after.
//
// A job's shared cursor is never taken from a client: a new feed starts at
// the stream's last entry (or 0-0 when it has none), read with XREVRANGE,
// so a client id ahead of the stream (or between two entries) cannot make
// the shared XREAD wait for entries that will never come for the others.
// Each subscriber skips what is not after its own id; one whose id is
// behind the feed's cursor fetches the gap itself (CatchUpTo).
func (h *Hub) Subscribe(ctx context.Context, job string, after jobs.StreamID) (*Sub, error) {
	c := make(chan *Entry, subBuffer)
	s := &Sub{Job: job, C: c, c: c}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrHubClosed
	}
	f := h.feeds[job]
	added := false
	if f == nil {
		h.mu.Unlock()
		last, err := h.lastID(ctx, job)
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, ErrHubClosed
		}
		if f = h.feeds[job]; f == nil { // nobody created it meanwhile
			f = &feed{cursor: last, subs: map[*Sub]struct{}{}}
			h.feeds[job] = f
			h.gen++
			added = true
		}
	}
	if after.Less(f.cursor) {
		s.CatchUpTo = f.cursor
	}
	f.subs[s] = struct{}{}
	h.mu.Unlock()
	if added {
		h.poke()
	}
	return s, nil
}

// lastID is the id of the last entry of job's event stream, zero when the
// stream is empty or missing.
func (h *Hub) lastID(ctx context.Context, job string) (jobs.StreamID, error) {
	msgs, err := h.ctl.XRevRangeN(ctx, jobs.EventsKey(job), "+", "-", 1).Result()
	if jobs.IsWrongType(err) {
		return jobs.StreamID{}, fmt.Errorf("last event of job %s: %w: %w", job, ErrNotStream, err)
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return jobs.StreamID{}, fmt.Errorf("last event of job %s: %w", job, err)
	}
	if len(msgs) == 0 {
		return jobs.StreamID{}, nil
	}
	return jobs.ParseStreamID(msgs[0].ID)
}

// Unsubscribe removes s; its feed goes when its last subscriber does.
func (h *Hub) Unsubscribe(s *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(s, nil)
}

func (h *Hub) removeLocked(s *Sub, reason error) {
	f := h.feeds[s.Job]
	if f == nil {
		return
	}
	if _, ok := f.subs[s]; !ok {
		return
	}
	delete(f.subs, s)
	s.err = reason
	close(s.c)
	if len(f.subs) == 0 {
		delete(h.feeds, s.Job)
	}
}

// Feeds is the number of job streams currently read.
func (h *Hub) Feeds() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.feeds)
}

// poke makes the reader pick up a new feed now rather than after its
// blocking call times out.
func (h *Hub) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
	h.unblock(unblockTries, func() bool { return h.snapGen < h.gen })
}

// unblock interrupts the reader's blocking XREAD with CLIENT UNBLOCK while
// it is inside one and need (called under h.mu) holds, retrying up to
// tries times in case the XREAD has not reached Redis yet.
func (h *Hub) unblock(tries int, need func() bool) {
	for range tries {
		h.mu.Lock()
		stale := h.blocked && need()
		h.mu.Unlock()
		if !stale {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n, err := h.ctl.ClientUnblock(ctx, h.readerID.Load()).Result()
		cancel()
		if err != nil || n == 1 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Run reads until ctx is done, then closes every subscription with
// ErrHubClosed so SSE handlers end and graceful shutdown is not held up.
// go-redis does not cut a blocking read short when its context is
// cancelled, so the XREAD in progress is interrupted with CLIENT UNBLOCK:
// left alone, it would hold the shutdown for up to readBlock.
//
// While reads fail (Redis down or restarting) it retries after
// retryMin, doubling up to retryMax, and logs the first failure and the
// recovery rather than every attempt.
func (h *Hub) Run(ctx context.Context) error {
	defer h.reader.Close()
	defer h.shutdown()
	unblocked := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(unblocked)
		h.unblock(shutdownUnblockTries, func() bool { return true })
	})
	defer func() {
		if !stop() {
			<-unblocked // nothing started here outlives Run
		}
	}()
	var wait time.Duration // before the next read; 0 while reads succeed
	for ctx.Err() == nil {
		streams := h.snapshot()
		if streams == nil {
			select {
			case <-ctx.Done():
			case <-h.wake:
			}
			continue
		}
		res, err := h.reader.XRead(ctx, &redis.XReadArgs{Streams: streams, Count: readCount, Block: h.block}).Result()
		h.mu.Lock()
		h.blocked = false
		h.mu.Unlock()
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				break
			}
			// One key that is not a stream fails the whole XREAD, for
			// every job it reads: that job's feed goes, the others' read
			// goes on at once.
			if jobs.IsWrongType(err) && h.dropNotStreams(ctx) {
				continue
			}
			if wait == 0 {
				h.log.Warn("event hub cannot read from Redis; retrying", "err", err)
				wait = retryMin
			} else {
				wait = min(2*wait, retryMax)
			}
			select {
			case <-ctx.Done():
			case <-h.wake: // a new watcher got through to Redis: it may be back
			case <-time.After(wait):
			}
			continue
		}
		if wait != 0 {
			h.log.Info("event hub reads from Redis again")
			wait = 0
		}
		if err == nil {
			h.dispatch(res)
		}
	}
	return nil
}

func (h *Hub) snapshot() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.feeds) == 0 {
		return nil
	}
	keys := make([]string, 0, 2*len(h.feeds))
	ids := make([]string, 0, len(h.feeds))
	for job, f := range h.feeds {
		keys = append(keys, jobs.EventsKey(job))
		ids = append(ids, f.cursor.String())
	}
	h.blocked = true
	h.snapGen = h.gen
	return append(keys, ids...)
}

func (h *Hub) dispatch(res []redis.XStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, st := range res {
		job := strings.TrimSuffix(strings.TrimPrefix(st.Stream, "job:"), ":events")
		f := h.feeds[job]
		if f == nil {
			continue
		}
		for _, m := range st.Messages {
			id := jobs.MustStreamID(m.ID)
			if !f.cursor.Less(id) {
				continue
			}
			f.cursor = id
			e := &Entry{Event: jobs.EventFromValues(m.ID, m.Values)}
			for s := range f.subs {
				select {
				case s.c <- e:
				default:
					h.removeLocked(s, ErrLagged)
				}
			}
			if h.feeds[job] == nil {
				break
			}
		}
	}
}

func (h *Hub) shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, f := range h.feeds {
		for s := range f.subs {
			h.removeLocked(s, ErrHubClosed)
		}
	}
}

// dropNotStreams closes, with ErrNotStream, every subscription of a job
// whose events key holds something other than a stream (a missing key is
// fine: XREAD waits for it). It reports whether it dropped any.
func (h *Hub) dropNotStreams(ctx context.Context) bool {
	h.mu.Lock()
	names := make([]string, 0, len(h.feeds))
	for job := range h.feeds {
		names = append(names, job)
	}
	h.mu.Unlock()
	pipe := h.ctl.Pipeline()
	types := make([]*redis.StatusCmd, len(names))
	for i, job := range names {
		types[i] = pipe.Type(ctx, jobs.EventsKey(job))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		h.log.Warn("event hub: check the type of events keys", "err", err)
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	dropped := false
	for i, job := range names {
		typ := types[i].Val()
		if typ == "stream" || typ == "none" {
			continue
		}
		f := h.feeds[job]
		if f == nil {
			continue
		}
		h.log.Warn("job events key is not a stream; closing its event streams", "job_id", job, "type", typ)
		for s := range f.subs {
			h.removeLocked(s, ErrNotStream)
		}
		dropped = true
	}
	return dropped
}
