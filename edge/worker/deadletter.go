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
// acknowledged and deleted from jobs:stream, in one script and only while
// the message is pending under this consumer (deadScript). If the job
// cannot be failed (Redis trouble) the message stays pending and the next
// scan retries.
//
// A jobs:dead entry holds the original job_id, task and payload fields plus
// msg_id (the jobs:stream id), deliveries, reason, consumer (who
// dead-lettered it) and ts (ms).
func (p *Pool) deadLetter(ctx context.Context, e entry, reason string, failJob bool) {
	str := func(k string) string { s, _ := e.msg.Values[k].(string); return s }
	id := str("job_id")
	if failJob && id != "" {
		// The job is failed by a script of its own, before deadScript: a
		// jobs:dead it could not write would leave the job ended as error
		// and its message pending for good, so it is looked at first
		// (deadScript checks it again, atomically with its writes).
		if t, err := p.rdb.Type(ctx, jobs.DeadStream).Result(); err == nil && t != "stream" && t != "none" {
			p.log.Warn("dead-letter: job and message left as they are", "msg_id", e.msg.ID, "job_id", id,
				"err", &jobs.WrongTypeError{Key: jobs.DeadStream, Type: t})
			return
		}
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
	values := []any{
		"job_id", id, "task", str("task"), "payload", str("payload"),
		"msg_id", e.msg.ID, "deliveries", itoa(e.deliveries), "reason", reason,
		"consumer", p.consumer, "ts", itoa(time.Now().UnixMilli()),
	}
	args := append([]any{p.consumer, e.msg.ID, p.s.DeadMaxLen}, values...)
	reply, err := deadScript.Run(ctx, p.rdb, []string{jobs.QueueStream, jobs.DeadStream}, args...).Result()
	if err != nil {
		p.log.Warn("dead-letter: copy and ack", "msg_id", e.msg.ID, "err", err)
		return
	}
	if t, ok := reply.(string); ok {
		p.log.Warn("dead-letter: message left pending", "msg_id", e.msg.ID, "job_id", id,
			"err", &jobs.WrongTypeError{Key: jobs.DeadStream, Type: t})
		return
	}
	if ended, _ := reply.(int64); ended == 0 {
		p.log.Info("dead-letter skipped: the message is no longer pending under this consumer", "msg_id", e.msg.ID, "job_id", id, "reason", reason)
		return
	}
	p.log.Warn("message dead-lettered", "msg_id", e.msg.ID, "job_id", id, "reason", reason, "deliveries", e.deliveries)
}

// deadScript copies a queue message to jobs:dead, then acknowledges and
// deletes it, only while it is pending under the calling consumer: one
// that lost it (another consumer claimed it) or meets it already ended
// (a retry after a lost reply) adds no second copy and ends nothing of
// another's. It returns 1 when it did, 0 when not, and the type of the
// dead stream when that is no stream: it is checked before the XADD, which
// is the first write, so the script never fails halfway (the
// acknowledgement would otherwise be lost with the copy made).
//
// KEYS: queue stream, dead stream
// ARGV: consumer, message id, dead stream MAXLEN (approximate; 0 keeps
// every entry), then the dead entry's fields and values
var deadScript = redis.NewScript(`
redis.replicate_commands()
local p = redis.call('XPENDING', KEYS[1], '` + jobs.Group + `', ARGV[2], ARGV[2], 1)
if not p[1] or p[1][2] ~= ARGV[1] then return 0 end
local t = redis.call('TYPE', KEYS[2])['ok']
if t ~= 'stream' and t ~= 'none' then return t end
if tonumber(ARGV[3]) > 0 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(ARGV, 4))
else
  redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
end
redis.call('XACK', KEYS[1], '` + jobs.Group + `', ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
`)
