package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// outcomeKind says what the finisher writes for a job.
type outcomeKind int

const (
	finishDone  outcomeKind = iota // status done + result + event + XACK + XDEL
	finishError                    // status error + error + event + XACK + XDEL
	ackOnly                        // cancelled: the terminal event exists; XACK + XDEL
	abandon                        // shutdown or lost claim: leave pending
	deadUnknown                    // status outside the state machine: jobs:dead + XACK + XDEL, job untouched
)

type outcome struct {
	j      *job
	kind   outcomeKind
	result json.RawMessage
	err    json.RawMessage
	ran    time.Duration // how long the backend ran
}

// execute runs started jobs until the work channel is closed.
func (p *Pool) execute(bookCtx context.Context) {
	for j := range p.work {
		p.fin <- p.runJob(bookCtx, j)
	}
}

func (p *Pool) runJob(bookCtx context.Context, j *job) (o outcome) {
	start := time.Now()
	defer func() { o.ran = time.Since(start) }()
	defer j.cancel(nil)
	// A delta that cannot be written is lost to the job's stream, not the
	// job: the result still carries the whole answer. What refuses one
	// (Redis out of memory, a key of another type) refuses the next too,
	// so the first failure is logged and the rest are counted, for one
	// line when the job ends instead of one per delta of a long answer.
	var deltaFailed atomic.Int64
	deltas := newCoalescer(p.s.DeltaInterval, p.s.DeltaBytes, func(text string) {
		data, _ := json.Marshal(map[string]string{"text": text})
		_, err := p.store.AppendEvent(bookCtx, j.id, "delta", StepStream, data)
		if jobs.IsGone(err) {
			j.cancel(errJobCanceled)
		} else if err != nil && deltaFailed.Add(1) == 1 {
			p.log.Warn("write delta", "job_id", j.id, "err", err, "note", "later failures of this job's deltas are counted, not logged")
		}
	})
	res, err := p.backend.Run(j.ctx, backend.Request{JobID: j.id, Task: j.task, Payload: j.payload}, deltas.Add)
	deltas.Close(j.ctx.Err() == nil)
	if n := deltaFailed.Load(); n > 1 {
		p.log.Warn("write delta: the job's streamed output was not all stored", "job_id", j.id, "failed", n)
	}
	if err == nil {
		if len(res) == 0 {
			res = json.RawMessage(`{}`)
		}
		return outcome{j: j, kind: finishDone, result: res}
	}
	if j.ctx.Err() != nil {
		cause := context.Cause(j.ctx)
		switch {
		case errors.Is(cause, errJobCanceled):
			return outcome{j: j, kind: ackOnly}
		case errors.Is(cause, errUnknownStatus):
			return outcome{j: j, kind: deadUnknown}
		case errors.Is(cause, errShutdown), errors.Is(cause, lease.ErrStale):
			p.log.Info("job abandoned", "job_id", j.id, "reason", cause.Error())
			return outcome{j: j, kind: abandon}
		}
	}
	be := backend.AsError(err)
	b, _ := json.Marshal(be)
	return outcome{j: j, kind: finishError, err: b}
}

// finishLoop writes outcomes in batches: whatever has queued up while the
// previous batch was being written goes out in the next round trip.
func (p *Pool) finishLoop(bookCtx context.Context) {
	for o := range p.fin {
		batch := []outcome{o}
	more:
		for len(batch) < p.s.Batch {
			select {
			case o, ok := <-p.fin:
				if !ok {
					break more
				}
				batch = append(batch, o)
			default:
				break more
			}
		}
		p.writeOutcomes(bookCtx, batch)
	}
}

// writeOutcomes writes a batch, retrying Redis failures a few times; a job
// whose outcome still cannot be written stays pending and is re-run by
// recovery.
func (p *Pool) writeOutcomes(ctx context.Context, batch []outcome) {
	pending := batch
	bo := lease.Backoff{Base: 50 * time.Millisecond, Cap: time.Second}
	for attempt := 1; len(pending) > 0; attempt++ {
		var (
			ops    []jobs.Op
			opOf   []outcome
			ackIDs []string
			acked  []outcome
			failed []outcome
		)
		for _, o := range pending {
			switch o.kind {
			case finishDone:
				ops = append(ops, jobs.Op{ID: o.j.id, T: jobs.Transition{To: jobs.Done, Step: StepFinish, Result: o.result, AckMessageID: o.j.msgID}})
				opOf = append(opOf, o)
			case finishError:
				ops = append(ops, jobs.Op{ID: o.j.id, T: jobs.Transition{To: jobs.Error, Step: StepFinish, Error: o.err, AckMessageID: o.j.msgID}})
				opOf = append(opOf, o)
			case ackOnly:
				ackIDs = append(ackIDs, o.j.msgID)
				acked = append(acked, o)
			case abandon:
				p.done(o)
			case deadUnknown:
				p.deadLetter(ctx, entry{msg: o.j.msg, deliveries: o.j.deliveries}, CodeUnknownStatus, false)
				p.done(o)
			}
		}
		for i, r := range p.store.ApplyBatch(ctx, ops) {
			// Success acked the message in the same script; ErrFinished or
			// ErrNotFound (cancelled meanwhile, or expired) acked it too.
			if r.Err == nil || jobs.IsGone(r.Err) {
				if r.Err == nil {
					p.observe(opOf[i], string(ops[i].T.To))
				}
				p.done(opOf[i])
				continue
			}
			if jobs.IsUnknownStatus(r.Err) {
				// No retry can finish it (see start).
				o := opOf[i]
				p.deadLetter(ctx, entry{msg: o.j.msg, deliveries: o.j.deliveries}, CodeUnknownStatus, false)
				p.done(o)
				continue
			}
			failed = append(failed, opOf[i])
			p.log.Warn("finish job", "job_id", opOf[i].j.id, "attempt", attempt, "err", r.Err)
		}
		if len(ackIDs) > 0 {
			if err := p.store.Ack(ctx, ackIDs...); err != nil {
				failed = append(failed, acked...)
				p.log.Warn("ack cancelled jobs", "attempt", attempt, "err", err)
			} else {
				for _, o := range acked {
					p.observe(o, jobs.Canceled)
					p.done(o)
				}
			}
		}
		pending = failed
		if len(pending) == 0 {
			return
		}
		if attempt >= 5 || ctx.Err() != nil {
			for _, o := range pending {
				p.log.Error("job outcome not written; left pending for recovery", "job_id", o.j.id)
				p.done(o)
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(bo.Delay(attempt)):
		}
	}
}

// done forgets a job and frees its slot.
func (p *Pool) done(o outcome) {
	p.untrack(o.j)
	p.releaseSlots(1)
}
