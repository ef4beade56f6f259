package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// entry is a queue message as delivered, with its delivery count.
type entry struct {
	msg        redis.XMessage
	deliveries int64
}

// readLoop reads new messages (">") for as many free slots as there are,
// up to Batch, and starts them.
func (p *Pool) readLoop(ctx, jobsCtx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		n := p.takeSlots(ctx, p.s.Batch, true)
		if n == 0 {
			return
		}
		streams, err := p.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: jobs.Group, Consumer: p.consumer, Streams: []string{jobs.QueueStream, ">"},
			Count: int64(n), Block: p.s.Block,
		}).Result()
		if err != nil {
			p.releaseSlots(n)
			if errors.Is(err, redis.Nil) || ctx.Err() != nil {
				failures = 0
				continue
			}
			failures++
			if redis.HasErrorPrefix(err, "NOGROUP") {
				_ = p.store.EnsureGroup(ctx)
			}
			p.log.Warn("read queue", "err", err)
			p.sleep(ctx, failures)
			continue
		}
		failures = 0
		var got []entry
		for _, s := range streams {
			for _, m := range s.Messages {
				got = append(got, entry{msg: m, deliveries: 1})
			}
		}
		p.releaseSlots(n - len(got))
		p.start(jobsCtx, got)
	}
}

// sleep backs off after consecutive failures, or returns early on ctx.
func (p *Pool) sleep(ctx context.Context, failures int) {
	d := time.Duration(failures) * 200 * time.Millisecond
	if d > 5*time.Second {
		d = 5 * time.Second
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// start moves each entry's job to running in one pipelined round trip and
// hands the started ones to the executors. Each entry holds one slot; the
// slot is released here for entries that will not run.
func (p *Pool) start(jobsCtx context.Context, entries []entry) {
	if len(entries) == 0 {
		return
	}
	var (
		ops     []jobs.Op
		started []*job
		ack     []string
	)
	entryOf := make(map[*job]entry, len(entries))
	for _, e := range entries {
		j, ok := parse(e)
		if !ok {
			// Without a job id there is no job to fail: keep a copy and drop it.
			p.deadLetter(jobsCtx, e, "malformed_message", false)
			p.releaseSlots(1)
			continue
		}
		data, _ := json.Marshal(map[string]any{"worker": p.consumer, "delivery": e.deliveries})
		ops = append(ops, jobs.Op{ID: j.id, T: jobs.Transition{To: jobs.Running, Step: StepStart, Data: data}})
		started = append(started, j)
		entryOf[j] = e
	}
	res := p.store.ApplyBatch(jobsCtx, ops)
	for i, r := range res {
		j := started[i]
		switch {
		case r.Err == nil:
			j.ctx, j.cancel = context.WithCancelCause(jobsCtx)
			p.track(j)
			p.work <- j
		case jobs.IsGone(r.Err):
			// Cancelled while queued, finished by an earlier delivery, or
			// expired: nothing to run, no event to write.
			ack = append(ack, j.msgID)
		case jobs.IsUnknownStatus(r.Err):
			// No delivery will ever start it: end the message once,
			// leaving the job as it is for whatever wrote that status.
			p.deadLetter(jobsCtx, entryOf[j], CodeUnknownStatus, false)
			p.releaseSlots(1)
		default:
			// Redis trouble: the message stays pending and is recovered.
			p.log.Warn("start job", "job_id", j.id, "err", r.Err)
			p.releaseSlots(1)
		}
	}
	if len(ack) > 0 {
		if err := p.store.Ack(jobsCtx, ack...); err != nil {
			p.log.Warn("ack skipped messages", "err", err)
		}
		p.releaseSlots(len(ack))
	}
}

// parse reads a queue message. A payload that is not a JSON object is
// passed on as {"_raw": "<payload>"}.
func parse(e entry) (*job, bool) {
	str := func(k string) string { s, _ := e.msg.Values[k].(string); return s }
	j := &job{msg: e.msg, msgID: e.msg.ID, id: str("job_id"), task: str("task"), deliveries: e.deliveries}
	if j.id == "" {
		return nil, false
	}
	j.payload = normalizePayload(str("payload"))
	return j, true
}

func normalizePayload(s string) json.RawMessage {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err == nil && obj != nil {
		return json.RawMessage(s)
	}
	raw, _ := json.Marshal(map[string]string{"_raw": s})
	return raw
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
