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
	ackGone                        // finished elsewhere or expired: XACK + XDEL, not counted
	abandon                        // shutdown or lost claim: leave pending
	deadUnknown                    // status outside the state machine: jobs:dead + XACK + XDEL, job untouched
)

type outcome struct {
	j      *job
	kind   outcomeKind
	result json.RawMessage
	err    json.RawMessage
	ran    time.Duration // how long the backend ran
	// refusals counts writes of it that Redis refused (not outages).
	refusals int
	// token is the transition token of every attempt to write it, so that
	// an attempt whose reply was lost though Redis ran it makes the next
	// one a no-op answered as it was (see jobs.Transition.Token), not a
	// finish refused as already done and left uncounted.
	token string
}

// execute runs started jobs until the work channel is closed.
func (p *Pool) execute(bookCtx context.Context) {
	for j := range p.work {
		o := p.runJob(bookCtx, j)
		j.finishing.Store(true)
		p.fin <- o
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
			j.cancel(goneCause(err))
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
		case errors.Is(cause, errJobGone):
			return outcome{j: j, kind: ackGone}
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

// goneCause is the cause a running job is stopped with when a write to it
// finds it ended (jobs.IsGone): cancelled, or finished elsewhere or expired.
func goneCause(err error) error {
	var terr *lease.TransitionError
	if errors.As(err, &terr) && terr.From == jobs.Canceled {
		return errJobCanceled
	}
	return errJobGone
}

// finishLoop writes outcomes in batches: whatever has queued up while the
// previous batch was being written goes out in the next round trip. Once
// runCtx ends (shutdown), a write Redis does not take is not retried.
func (p *Pool) finishLoop(bookCtx, runCtx context.Context) {
	retryCtx, stopRetry := context.WithCancel(bookCtx)
	defer stopRetry()
	defer context.AfterFunc(runCtx, stopRetry)()
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
		p.writeOutcomes(bookCtx, retryCtx, batch)
	}
}

// finishBackoff spaces the retries of an outcome write. Its cap keeps a
// job whose result waits out an outage from being written more than a few
// seconds after Redis is back.
var finishBackoff = lease.Backoff{Base: 50 * time.Millisecond, Cap: 4 * time.Second}

// refusalAttempts is how often a write is tried that Redis answered with
// an error of its own (not an outage): such a refusal is unlikely to
// change, and the job is left to recovery rather than hold its slot.
const refusalAttempts = 5

// writeOutcomes writes a batch. A write that fails because Redis cannot be
// reached (restarted, loading its data, the connection cut) is retried
// for as long as that lasts: the outcome is in memory, and the job stays
// tracked and holds its slot, so the heartbeat keeps its queue entry from
// being claimed and the backend does not run a second time. It is given
// up, leaving the entry pending for recovery, only when a heartbeat found
// the entry taken by another consumer, when shutdown has begun (retryCtx
// ends: the first attempt still uses ctx, so jobs finishing in the drain
// are written), or after refusalAttempts refusals.
func (p *Pool) writeOutcomes(ctx, retryCtx context.Context, batch []outcome) {
	pending := batch
	for i := range pending {
		if pending[i].token == "" {
			pending[i].token = jobs.NewToken()
		}
	}
	wctx := ctx
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
				ops = append(ops, jobs.Op{ID: o.j.id, T: jobs.Transition{To: jobs.Done, Step: StepFinish, Result: o.result, AckMessageID: o.j.msgID, Token: o.token}})
				opOf = append(opOf, o)
			case finishError:
				ops = append(ops, jobs.Op{ID: o.j.id, T: jobs.Transition{To: jobs.Error, Step: StepFinish, Error: o.err, AckMessageID: o.j.msgID, Token: o.token}})
				opOf = append(opOf, o)
			case ackOnly, ackGone:
				ackIDs = append(ackIDs, o.j.msgID)
				acked = append(acked, o)
			case abandon:
				p.done(o)
			case deadUnknown:
				p.deadLetter(ctx, entry{msg: o.j.msg, deliveries: o.j.deliveries}, CodeUnknownStatus, false)
				p.done(o)
			}
		}
		for i, r := range p.store.ApplyBatch(wctx, ops) {
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
			if wctx.Err() != nil {
				failed = append(failed, opOf[i]) // cut short by shutdown: given up below
			} else if o, keep := p.writeFailed(opOf[i], attempt, r.Err, "finish job"); keep {
				failed = append(failed, o)
			}
		}
		if len(ackIDs) > 0 {
			if err := p.store.Ack(wctx, ackIDs...); err != nil {
				for _, o := range acked {
					if wctx.Err() != nil {
						failed = append(failed, o)
					} else if o, keep := p.writeFailed(o, attempt, err, "ack cancelled job"); keep {
						failed = append(failed, o)
					}
				}
			} else {
				for _, o := range acked {
					if o.kind == ackOnly {
						p.observe(o, jobs.Canceled)
					}
					p.done(o)
				}
			}
		}
		pending = failed
		if len(pending) == 0 {
			return
		}
		select {
		case <-retryCtx.Done():
			p.giveUp(pending, "shutting down")
			return
		case <-time.After(finishBackoff.Delay(attempt)):
		}
		pending = p.dropLost(pending)
		wctx = retryCtx
	}
}

// writeFailed counts a failed write of o's outcome and logs it (the first
// failure and every tenth, not each retry of a long outage). It reports
// whether to try again, giving the job up after refusalAttempts refusals.
func (p *Pool) writeFailed(o outcome, attempt int, err error, what string) (outcome, bool) {
	if !jobs.Unreachable(err) {
		o.refusals++
		if o.refusals >= refusalAttempts {
			p.log.Error("job outcome not written; left pending for recovery", "job_id", o.j.id,
				"reason", "refused by redis", "attempts", attempt, "err", err)
			p.done(o)
			return o, false
		}
	}
	if attempt == 1 || attempt%10 == 0 {
		p.log.Warn(what+"; retrying", "job_id", o.j.id, "attempt", attempt, "err", err)
	}
	return o, true
}

// dropLost gives up the outcomes whose queue entry a heartbeat found
// pending under another consumer: that consumer has the job now.
func (p *Pool) dropLost(pending []outcome) []outcome {
	kept := pending[:0]
	var lost []outcome
	for _, o := range pending {
		if o.j.lost.Load() {
			lost = append(lost, o)
		} else {
			kept = append(kept, o)
		}
	}
	p.giveUp(lost, "queue message claimed by another consumer")
	return kept
}

// giveUp releases jobs whose outcome was not written: their queue entries
// stay pending and recovery runs them again.
func (p *Pool) giveUp(pending []outcome, reason string) {
	for _, o := range pending {
		p.log.Error("job outcome not written; left pending for recovery", "job_id", o.j.id, "reason", reason)
		p.done(o)
	}
}

// done forgets a job and frees its slot.
func (p *Pool) done(o outcome) {
	p.untrack(o.j)
	p.releaseSlots(1)
}
