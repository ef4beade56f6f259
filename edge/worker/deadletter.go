package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// CodeMaxDeliveries is the error code of a dead-lettered job.
const CodeMaxDeliveries = "max_deliveries_exceeded"

// CodeUnknownStatus is the dead-letter reason of a message whose job has a
// status outside the state machine.
const CodeUnknownStatus = "unknown_status"

// deadLetter ends a message for good. When failJob is set the job becomes
// error max_deliveries_exceeded with its terminal event (unless it already
// ended); then a copy of the message goes to jobs:dead and the message is
// acknowledged and deleted from jobs:stream, all in one MULTI. If the job cannot be failed
// (Redis trouble) the message stays pending and the next scan retries.
//
// A jobs:dead entry holds the original job_id, task and payload fields plus
// msg_id (the jobs:stream id), deliveries, reason, consumer (who
// dead-lettered it) and ts (ms).
func (p *Pool) deadLetter(ctx context.Context, e entry, reason string, failJob bool) {
	str := func(k string) string { s, _ := e.msg.Values[k].(string); return s }
	id := str("job_id")
	if failJob && id != "" {
		ev, _ := json.Marshal(map[string]any{
			"code": CodeMaxDeliveries,
			"message": daemon.CapMessage(fmt.Sprintf("queue message %s was delivered %d times; the limit is %d",
				e.msg.ID, e.deliveries, p.s.MaxDeliveries)),
			"deliveries": e.deliveries,
		})
		_, err := p.store.Apply(ctx, id, jobs.Transition{To: jobs.Error, Step: StepDeadLetter, Error: ev})
		if jobs.IsUnknownStatus(err) {
			// No status can be forced on it without losing what the
			// writer of that status meant; the message ends all the same,
			// or it would come back with every recovery pass.
			p.log.Warn("dead-letter: job status outside the state machine; job left as it is", "job_id", id, "err", err)
			err = nil
		}
		if err != nil && !jobs.IsGone(err) {
			p.log.Warn("dead-letter: fail job", "job_id", id, "err", err)
			return
		}
	}
	tx := p.rdb.TxPipeline()
	tx.XAdd(ctx, &redis.XAddArgs{
		Stream: jobs.DeadStream, MaxLen: int64(p.s.DeadMaxLen), Approx: true,
		Values: []any{
			"job_id", id, "task", str("task"), "payload", str("payload"),
			"msg_id", e.msg.ID, "deliveries", itoa(e.deliveries), "reason", reason,
			"consumer", p.consumer, "ts", itoa(time.Now().UnixMilli()),
		},
	})
	jobs.QueueAck(ctx, tx, e.msg.ID)
	if _, err := tx.Exec(ctx); err != nil {
		p.log.Warn("dead-letter: copy and ack", "msg_id", e.msg.ID, "err", err)
		return
	}
	p.log.Warn("message dead-lettered", "msg_id", e.msg.ID, "job_id", id, "reason", reason, "deliveries", e.deliveries)
}
