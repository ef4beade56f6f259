package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// claimer takes over pending messages idle for at least minIdle, up to
// count of them, returning each with its delivery count after the claim.
// With an error it still returns the entries it claimed and read: they are
// this consumer's now, and dropping them would leave them until they are
// idle again. more is false once the pass begun by restart has looked at
// the whole pending list: a call returning fewer entries than count (even
// none) does not mean that, since entries it met may have been deleted,
// held by a live consumer or running here.
type claimer interface {
	name() string
	restart()
	claim(ctx context.Context, minIdle time.Duration, count int) (got []entry, more bool, err error)
}

// chooseClaimer uses XAUTOCLAIM when the server is Redis >= 6.2 and the
// fallback is not forced, else XPENDING+XCLAIM.
func (p *Pool) chooseClaimer(ctx context.Context) (claimer, error) {
	if p.s.ClaimFallback {
		return &pendingClaimer{p: p, from: "-"}, nil
	}
	info, err := p.rdb.Info(ctx, "server").Result()
	if err != nil {
		return nil, fmt.Errorf("redis INFO server: %w", err)
	}
	if SupportsAutoClaim(info) {
		return &autoClaimer{p: p, cursor: "0-0"}, nil
	}
	return &pendingClaimer{p: p, from: "-"}, nil
}

// SupportsAutoClaim reports whether an INFO server reply names a Redis
// version of 6.2 or later, the first with XAUTOCLAIM.
func SupportsAutoClaim(info string) bool {
	major, minor, ok := redisVersion(info)
	return ok && (major > 6 || (major == 6 && minor >= 2))
}

// redisVersion reads the major and minor version from an INFO server reply.
func redisVersion(info string) (major, minor int, ok bool) {
	for _, line := range strings.Split(info, "\n") {
		v, found := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !found {
			continue
		}
		parts := strings.SplitN(v, ".", 3)
		if len(parts) < 2 {
			return 0, 0, false
		}
		major, err1 := strconv.Atoi(parts[0])
		minor, err2 := strconv.Atoi(parts[1])
		return major, minor, err1 == nil && err2 == nil
	}
	return 0, 0, false
}

// autoClaimer walks the pending list with XAUTOCLAIM (Redis >= 6.2). It
// claims with JUSTID, like the fallback path, because Redis 6.2 answers a
// claim of a deleted entry with a nil the client cannot parse; JUSTID does
// not count a delivery, so the claimed ids' delivery counts are read with
// XPENDING and written back incremented (XCLAIM ... RETRYCOUNT n+1 JUSTID,
// min idle 0: the entries are ours now), pipelined with the XRANGE that
// reads their fields.
type autoClaimer struct {
	p      *Pool
	cursor string
}

func (a *autoClaimer) name() string { return "XAUTOCLAIM" }

// restart starts the next pass at the head of the pending list.
func (a *autoClaimer) restart() { a.cursor = "0-0" }

// claim takes the next page. The pass is over only when the cursor comes
// back as 0-0: a page may hold fewer ids than count, or none, with more
// to come — Redis 7 leaves deleted entries out of the ids and gives up
// after scanning ten times count entries that are not idle.
func (a *autoClaimer) claim(ctx context.Context, minIdle time.Duration, count int) ([]entry, bool, error) {
	p := a.p
	// Sent as it is: the client's XAutoClaimJustID drops the third part
	// of Redis 7's reply, the pending entries found deleted.
	res, err := p.rdb.Do(ctx, "XAUTOCLAIM", jobs.QueueStream, jobs.Group, p.consumer, max(minIdle.Milliseconds(), 1),
		a.cursor, "COUNT", count, "JUSTID").Slice()
	if err != nil {
		return nil, false, fmt.Errorf("XAUTOCLAIM: %w", err)
	}
	next, ids, deleted, err := parseAutoClaim(res)
	if err != nil {
		return nil, false, fmt.Errorf("XAUTOCLAIM: %w", err)
	}
	if len(deleted) > 0 {
		// Redis 7 has taken them off the pending list itself.
		p.logVanished(deleted)
	}
	a.cursor = next
	more := next != "0-0"
	if len(ids) == 0 {
		return nil, more, nil
	}
	counts, err := p.deliveries(ctx, ids[0], ids[len(ids)-1])
	if err != nil {
		return nil, more, err
	}
	claimed := make([]claimedID, 0, len(ids))
	for _, id := range ids {
		n, ok := counts[id]
		if !ok {
			continue // no longer pending (Redis 7 drops deleted entries itself)
		}
		if p.owns(id) {
			// Ours and still running, its heartbeat late: XAUTOCLAIM only
			// reset its idle time. Counting a delivery here would bring a
			// live job closer to the dead-letter stream with every late
			// heartbeat (the fallback path skips such entries in idle).
			continue
		}
		claimed = append(claimed, claimedID{id: id, deliveries: n + 1})
	}
	got, err := p.readClaimed(ctx, claimed, true)
	return got, more, err
}

// deliveries returns the delivery counts of this consumer's pending
// entries between first and last.
func (p *Pool) deliveries(ctx context.Context, first, last string) (map[string]int64, error) {
	pend, err := p.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: jobs.QueueStream, Group: jobs.Group, Consumer: p.consumer,
		Start: first, End: last, Count: int64(p.s.Concurrency + p.s.Batch + 1000),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING: %w", err)
	}
	out := make(map[string]int64, len(pend))
	for _, e := range pend {
		out[e.ID] = e.RetryCount
	}
	return out, nil
}

// claimedID is a queue message this consumer has just claimed, with the
// delivery count that claim makes it.
type claimedID struct {
	id         string
	deliveries int64
}

// readClaimed reads the fields of claimed messages with XRANGE (and, when
// setCount is set, records their delivery counts in the same pipeline). A
// claimed id whose entry no longer exists cannot be run: its fields, the
// job id among them, are gone, so nothing ties it to a job any more. It is
// acknowledged (and deleted) so it leaves the pending list, and logged as
// an error; the job it carried, if any, stays in its last status until its
// TTL. Entries vanish only when something other than the workers deletes
// or trims them (EUTERPE_QUEUE_MAXLEN set too low, or a manual XDEL/XTRIM).
func (p *Pool) readClaimed(ctx context.Context, claimed []claimedID, setCount bool) ([]entry, error) {
	if len(claimed) == 0 {
		return nil, nil
	}
	pipe := p.rdb.Pipeline()
	ranges := make([]*redis.XMessageSliceCmd, len(claimed))
	counts := make([]*redis.Cmd, len(claimed))
	for i, c := range claimed {
		if setCount {
			counts[i] = pipe.Do(ctx, "XCLAIM", jobs.QueueStream, jobs.Group, p.consumer, 0, c.id, "RETRYCOUNT", c.deliveries, "JUSTID")
		}
		ranges[i] = pipe.XRange(ctx, jobs.QueueStream, c.id, c.id)
	}
	_, _ = pipe.Exec(ctx)
	var out []entry
	var vanished []string
	var errs []error
	for i, r := range ranges {
		msgs, err := r.Result()
		if err == nil && counts[i] != nil {
			// Run without its delivery counted, a poison message would
			// never reach the dead letters.
			err = counts[i].Err()
		}
		if err != nil {
			// Claimed but unread: it waits, pending here, until it is
			// idle again; the others run now.
			errs = append(errs, fmt.Errorf("XRANGE claimed %s: %w", claimed[i].id, err))
			continue
		}
		if len(msgs) == 0 {
			vanished = append(vanished, claimed[i].id)
			continue
		}
		out = append(out, entry{msg: msgs[0], deliveries: claimed[i].deliveries})
	}
	if len(vanished) > 0 {
		p.logVanished(vanished)
		if err := p.store.Ack(ctx, vanished...); err != nil {
			p.log.Warn("ack vanished queue entries", "err", err)
		}
	}
	return out, errors.Join(errs...)
}

// pendingClaimer is the Redis 6.0 path: XPENDING lists pending entries with
// idle time and delivery count, and XCLAIM (with the same min idle time, so
// two claimers cannot both win) takes the idle ones. XCLAIM is sent with
// JUSTID and an explicit RETRYCOUNT, because Redis before 7 answers a claim
// of a deleted entry with a nil the client cannot parse; the entries are
// then read with XRANGE (readClaimed).
//
// Like XAUTOCLAIM's cursor, a pass reads the pending list once: each call
// goes on after the last entry the previous one looked at. From the head
// every time, a list of many live entries before a few hundred idle ones
// would be read again for every handful claimed (quadratic in its length,
// the pass's slots held all along). An entry passed over (live, running
// here, or claimed by another consumer first) waits for the next pass.
type pendingClaimer struct {
	p    *Pool
	from string // XPENDING start of the next call: "-" or an id
}

func (c *pendingClaimer) name() string { return "XPENDING+XCLAIM" }

// restart starts the next pass at the head of the pending list.
func (c *pendingClaimer) restart() { c.from = "-" }

// claim takes up to count idle entries. The pass goes on while a call
// finds count of them (there may be more), whatever it then claims and
// reads: entries deleted while pending, or taken by another consumer
// first, leave a claim short with more idle entries behind them.
func (c *pendingClaimer) claim(ctx context.Context, minIdle time.Duration, count int) ([]entry, bool, error) {
	idle, err := c.idle(ctx, minIdle, count)
	if err != nil || len(idle) == 0 {
		return nil, false, err
	}
	got, err := c.take(ctx, minIdle, idle)
	return got, len(idle) == count, err
}

// take claims and reads the idle entries XPENDING listed. Each may have
// been claimed by another consumer, or acknowledged by its owner, since.
// The claims are one MULTI, each with an XPENDING and an XRANGE of its
// entry before its XCLAIM, so what the claim found is known even where XCLAIM
// says nothing: Redis 7 drops an entry deleted from the stream from the
// pending list without a word, and an entry its owner acknowledged (and
// deleted) just now is gone from both the same way afterwards. Still
// pending but gone from the stream is the deleted one.
func (c *pendingClaimer) take(ctx context.Context, minIdle time.Duration, idle []redis.XPendingExt) ([]entry, error) {
	p := c.p
	type claim struct {
		pending *redis.XPendingExtCmd
		fields  *redis.XMessageSliceCmd
		claimed *redis.Cmd
	}
	claims := make([]claim, len(idle))
	pipe := p.rdb.TxPipeline()
	for i, e := range idle {
		claims[i] = claim{
			pending: pipe.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: jobs.QueueStream, Group: jobs.Group, Start: e.ID, End: e.ID, Count: 1}),
			fields:  pipe.XRange(ctx, jobs.QueueStream, e.ID, e.ID),
			claimed: pipe.Do(ctx, "XCLAIM", jobs.QueueStream, jobs.Group, p.consumer, minIdle.Milliseconds(), e.ID,
				"RETRYCOUNT", e.RetryCount+1, "JUSTID"),
		}
	}
	_, _ = pipe.Exec(ctx)
	var claimed []claimedID
	var gone []string
	var errs []error
	for i, cl := range claims {
		ids, err := cl.claimed.StringSlice()
		if err != nil {
			// Not this entry's: the others' claims stand on their own.
			errs = append(errs, fmt.Errorf("XCLAIM %s: %w", idle[i].ID, err))
			continue
		}
		if len(ids) == 1 {
			claimed = append(claimed, claimedID{id: idle[i].ID, deliveries: idle[i].RetryCount + 1})
		} else if len(cl.pending.Val()) == 1 && cl.fields.Err() == nil && len(cl.fields.Val()) == 0 {
			gone = append(gone, idle[i].ID)
		}
	}
	out, err := p.readClaimed(ctx, claimed, false)
	errs = append(errs, err)
	if len(gone) > 0 {
		p.logVanished(gone)
	}
	return out, errors.Join(errs...)
}

// idle pages through the pending list from c.from, oldest first, for up
// to count entries idle for at least minIdle that this pool is not
// running, and moves c.from past the last entry it looked at. Live entries
// (of this or other consumers) may fill any number of pages before an
// idle one: XPENDING has no IDLE filter before Redis 6.2, and ids are
// paged inclusively (no "(" ranges either), starting after the last id seen.
func (c *pendingClaimer) idle(ctx context.Context, minIdle time.Duration, count int) ([]redis.XPendingExt, error) {
	p := c.p
	page := int64(max(pendingPage, count+p.s.Concurrency))
	if c.from == "" {
		c.from = "-"
	}
	var idle []redis.XPendingExt
	for {
		pend, err := p.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: jobs.QueueStream, Group: jobs.Group, Start: c.from, End: "+", Count: page,
		}).Result()
		if err != nil {
			return nil, fmt.Errorf("XPENDING: %w", err)
		}
		for i, e := range pend {
			if e.Idle >= minIdle && !p.owns(e.ID) {
				idle = append(idle, e)
				if len(idle) == count {
					return idle, c.after(e.ID)
				}
			}
			if i == len(pend)-1 {
				if err := c.after(e.ID); err != nil {
					return nil, err
				}
			}
		}
		if int64(len(pend)) < page {
			return idle, nil
		}
	}
}

// after moves the next XPENDING start past id.
func (c *pendingClaimer) after(id string) error {
	last, err := jobs.ParseStreamID(id)
	if err != nil {
		return fmt.Errorf("XPENDING: %w", err)
	}
	c.from = last.Next().String()
	return nil
}

// pendingPage is the most entries one XPENDING page asks for.
const pendingPage = 100

// owns reports whether msgID is in flight in this pool.
func (p *Pool) owns(msgID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.byMsg[msgID]
	return ok
}

// recoverLoop claims idle pending messages every ClaimInterval (and once at
// start, for what a previous life of this worker left behind).
func (p *Pool) recoverLoop(ctx, jobsCtx context.Context) {
	t := time.NewTicker(p.s.ClaimInterval)
	defer t.Stop()
	for {
		p.recoverOnce(ctx, jobsCtx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recoverOnce is one pass over the pending list: it claims idle messages,
// as many at a time as there are free slots (it waits for one),
// dead-letters the over-delivered ones and starts the rest, until the
// claimer has seen the whole list.
func (p *Pool) recoverOnce(ctx, jobsCtx context.Context) {
	p.claimer.restart()
	for ctx.Err() == nil {
		// Wait for a slot: the reader hands its slots back after every
		// XREADGROUP, and a waiting receiver gets the first one.
		n := p.takeSlots(ctx, p.s.Batch, true)
		if n == 0 {
			return
		}
		got, more, err := p.claimer.claim(ctx, p.s.ClaimIdle, n)
		if err != nil && ctx.Err() == nil {
			p.log.Warn("recover pending messages", "via", p.claimer.name(), "err", err)
		}
		p.releaseSlots(n - len(got))
		var run []entry
		for _, e := range got {
			if p.owns(e.msg.ID) {
				// Ours and still running (a heartbeat came late): keep going.
				p.releaseSlots(1)
				continue
			}
			if e.deliveries > int64(p.s.MaxDeliveries) {
				p.deadLetter(jobsCtx, e, "max_deliveries_exceeded", true)
				p.releaseSlots(1)
				continue
			}
			run = append(run, e)
		}
		if len(got) > 0 {
			p.log.Info("recovered pending messages", "via", p.claimer.name(), "claimed", len(got), "dead_lettered", len(got)-len(run))
		}
		p.start(jobsCtx, run)
		if err != nil || !more {
			return
		}
	}
}
