package worker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// claimer takes over pending messages idle for at least minIdle, up to
// count of them, returning each with its delivery count after the claim.
type claimer interface {
	name() string
	claim(ctx context.Context, minIdle time.Duration, count int) ([]entry, error)
}

// chooseClaimer uses XAUTOCLAIM when the server is Redis >= 6.2 and the
// fallback is not forced, else XPENDING+XCLAIM.
func (p *Pool) chooseClaimer(ctx context.Context) (claimer, error) {
	if p.s.ClaimFallback {
		return &pendingClaimer{p: p}, nil
	}
	info, err := p.rdb.Info(ctx, "server").Result()
	if err != nil {
		return nil, fmt.Errorf("redis INFO server: %w", err)
	}
	if SupportsAutoClaim(info) {
		return &autoClaimer{p: p, cursor: "0-0"}, nil
	}
	return &pendingClaimer{p: p}, nil
}

// SupportsAutoClaim reports whether an INFO server reply names a Redis
// version of 6.2 or later, the first with XAUTOCLAIM.
func SupportsAutoClaim(info string) bool {
	for _, line := range strings.Split(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		parts := strings.SplitN(v, ".", 3)
		if len(parts) < 2 {
			return false
		}
		major, err1 := strconv.Atoi(parts[0])
		minor, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil {
			return false
		}
		return major > 6 || (major == 6 && minor >= 2)
	}
	return false
}

// autoClaimer walks the pending list with XAUTOCLAIM (Redis >= 6.2), then
// reads the delivery counts of what it claimed with XPENDING.
type autoClaimer struct {
	p      *Pool
	cursor string
}

func (a *autoClaimer) name() string { return "XAUTOCLAIM" }

func (a *autoClaimer) claim(ctx context.Context, minIdle time.Duration, count int) ([]entry, error) {
	msgs, next, err := a.p.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: jobs.QueueStream, Group: jobs.Group, Consumer: a.p.consumer,
		MinIdle: minIdle, Start: a.cursor, Count: int64(count),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("XAUTOCLAIM: %w", err)
	}
	a.cursor = next
	if len(msgs) == 0 {
		return nil, nil
	}
	counts, err := a.p.deliveries(ctx, msgs[0].ID, msgs[len(msgs)-1].ID)
	if err != nil {
		return nil, err
	}
	out := make([]entry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, entry{msg: m, deliveries: counts[m.ID]})
	}
	return out, nil
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

// pendingClaimer is the Redis 6.0 path: XPENDING lists pending entries with
// idle time and delivery count, and XCLAIM (with the same min idle time, so
// two claimers cannot both win) takes the idle ones. XCLAIM is sent with
// JUSTID and an explicit RETRYCOUNT, because Redis before 7 answers a claim
// of a deleted entry with a nil the client cannot parse; the entries are
// then read with XRANGE, and a claimed id that no longer exists is
// acknowledged and forgotten.
type pendingClaimer struct{ p *Pool }

func (c *pendingClaimer) name() string { return "XPENDING+XCLAIM" }

func (c *pendingClaimer) claim(ctx context.Context, minIdle time.Duration, count int) ([]entry, error) {
	p := c.p
	pend, err := p.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: jobs.QueueStream, Group: jobs.Group, Start: "-", End: "+", Count: int64(count + p.s.Concurrency + 100),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING: %w", err)
	}
	var idle []redis.XPendingExt
	for _, e := range pend {
		if e.Idle >= minIdle && !p.owns(e.ID) {
			idle = append(idle, e)
			if len(idle) == count {
				break
			}
		}
	}
	if len(idle) == 0 {
		return nil, nil
	}
	pipe := p.rdb.Pipeline()
	claims := make([]*redis.Cmd, len(idle))
	for i, e := range idle {
		claims[i] = pipe.Do(ctx, "XCLAIM", jobs.QueueStream, jobs.Group, p.consumer, minIdle.Milliseconds(), e.ID,
			"RETRYCOUNT", e.RetryCount+1, "JUSTID")
	}
	_, _ = pipe.Exec(ctx)
	pipe = p.rdb.Pipeline()
	var claimed []redis.XPendingExt
	var ranges []*redis.XMessageSliceCmd
	for i, cmd := range claims {
		ids, err := cmd.StringSlice()
		if err != nil {
			return nil, fmt.Errorf("XCLAIM: %w", err)
		}
		if len(ids) == 1 { // empty: another consumer claimed it first
			claimed = append(claimed, idle[i])
			ranges = append(ranges, pipe.XRange(ctx, jobs.QueueStream, idle[i].ID, idle[i].ID))
		}
	}
	if len(claimed) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("XRANGE claimed: %w", err)
	}
	var out []entry
	var vanished []string
	for i, r := range ranges {
		msgs := r.Val()
		if len(msgs) == 0 {
			vanished = append(vanished, claimed[i].ID)
			continue
		}
		out = append(out, entry{msg: msgs[0], deliveries: claimed[i].RetryCount + 1})
	}
	if len(vanished) > 0 {
		p.log.Warn("claimed queue entries no longer exist (stream trimmed?); acknowledging", "ids", vanished)
		_ = p.rdb.XAck(ctx, jobs.QueueStream, jobs.Group, vanished...).Err()
	}
	return out, nil
}

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

// recoverOnce claims as many idle messages as there are free slots (it
// waits for one), dead-letters the over-delivered ones and starts the
// rest.
func (p *Pool) recoverOnce(ctx, jobsCtx context.Context) {
	for ctx.Err() == nil {
		// Wait for a slot: the reader hands its slots back after every
		// XREADGROUP, and a waiting receiver gets the first one.
		n := p.takeSlots(ctx, p.s.Batch, true)
		if n == 0 {
			return
		}
		got, err := p.claimer.claim(ctx, p.s.ClaimIdle, n)
		if err != nil {
			p.releaseSlots(n)
			if ctx.Err() == nil {
				p.log.Warn("recover pending messages", "via", p.claimer.name(), "err", err)
			}
			return
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
		if len(got) < n {
			return
		}
	}
}
