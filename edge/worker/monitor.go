package worker

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// refreshScript is the heartbeat of this consumer's in-flight jobs. For
// each entry still pending under this consumer it resets the idle time
// (XCLAIM ... 0 JUSTID, which does not count a delivery) and, while the
// job's status is running, keeps the job's keys alive: job:{id},
// job:{id}:events and its idempotency record (as the transition script
// does) expire the larger of ttl_s and the keep-alive window from now.
// Only events refresh those TTLs otherwise, and a backend that sends none
// (exec, http, embed) can run longer than ttl_s. The entries not pending
// under this consumer are returned as pairs of id and "other" (pending
// under another consumer) or "gone" (no longer pending). Every command is
// in Redis 6.0.
//
// KEYS: queue stream, then per job its hash and its events stream.
// ARGV: consumer, keep-alive window (s), then per job its message id and job id.
var refreshScript = redis.NewScript(`
redis.replicate_commands()
local me, window = ARGV[1], ARGV[2]
local function keepalive(hash, events, id)
  local h = redis.pcall('HMGET', hash, 'status', 'ttl_s', '` + jobs.HasIdempotencyField + `')
  if h['err'] or h[1] ~= '` + jobs.Running + `' then return end
  local ttl = h[2]
  if not (ttl and #ttl <= 10 and string.match(ttl, '^[1-9]%d*$')) then return end
  if tonumber(ttl) < tonumber(window) then ttl = window end
  redis.call('EXPIRE', hash, ttl)
  redis.call('EXPIRE', events, ttl)
  local back = '` + jobs.IdempotencyJobKey("") + `' .. id
  local ik = h[3] ~= '0' and redis.pcall('GET', back)
  if type(ik) == 'string' then
    redis.call('EXPIRE', back, ttl)
    if redis.pcall('GET', '` + jobs.IdempotencyKey("") + `' .. ik) == id then
      redis.call('EXPIRE', '` + jobs.IdempotencyKey("") + `' .. ik, ttl)
      redis.call('EXPIRE', '` + jobs.IdempotencyFingerprintKey("") + `' .. ik, ttl)
    end
  end
end
local lost = {}
for n = 1, (#ARGV - 2) / 2 do
  local msg = ARGV[1 + 2 * n]
  local p = redis.call('XPENDING', KEYS[1], '` + jobs.Group + `', msg, msg, 1)
  if not p[1] then
    lost[#lost + 1] = msg
    lost[#lost + 1] = 'gone'
  elseif p[1][2] ~= me then
    lost[#lost + 1] = msg
    lost[#lost + 1] = 'other'
  else
    redis.call('XCLAIM', KEYS[1], '` + jobs.Group + `', me, 0, msg, 'JUSTID')
    keepalive(KEYS[2 * n], KEYS[2 * n + 1], ARGV[2 + 2 * n])
  end
end
return lost
`)

// Why a heartbeat did not find an entry pending under this consumer, as
// refreshScript answers.
const (
	entryOther = "other" // pending under another consumer
	entryGone  = "gone"  // acknowledged (or deleted)
)

// monitor refreshes in-flight messages at a third of ClaimIdle (the lease
// heartbeat rule) and polls the status of running jobs every CancelPoll, a
// safety net for cancel messages lost while pub/sub was reconnecting. A job
// not yet refreshed gets its first heartbeat at the poll after it started,
// so a ttl_s shorter than the heartbeat period does not expire its keys
// before then.
func (p *Pool) monitor(ctx context.Context) {
	hb := time.NewTicker(lease.HeartbeatInterval(p.s.ClaimIdle))
	defer hb.Stop()
	poll := time.NewTicker(p.s.CancelPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			p.refresh(ctx, p.tracked())
		case <-poll.C:
			p.pollStatus(ctx)
			p.refresh(ctx, p.unkept())
		}
	}
}

// unkept returns the running jobs no heartbeat has refreshed yet.
func (p *Pool) unkept() []*job {
	var out []*job
	for _, j := range p.tracked() {
		if !j.kept.Load() && !j.finishing.Load() {
			out = append(out, j)
		}
	}
	return out
}

// keepWindow is how long, at least, a heartbeat keeps a running job's keys
// alive: the claim idle time, three heartbeat periods, so keys do not
// expire between heartbeats, nor when two in a row fail.
func (p *Pool) keepWindow() int64 {
	return int64((p.s.ClaimIdle + time.Second - 1) / time.Second)
}

func (p *Pool) refresh(ctx context.Context, running []*job) {
	if len(running) == 0 {
		return
	}
	keys := make([]string, 0, 1+2*len(running))
	keys = append(keys, jobs.QueueStream)
	args := make([]any, 0, 2+2*len(running))
	args = append(args, p.consumer, p.keepWindow())
	for _, j := range running {
		keys = append(keys, jobs.JobKey(j.id), jobs.EventsKey(j.id))
		args = append(args, j.msgID, j.id)
	}
	lost, err := refreshScript.Run(ctx, p.rdb, keys, args...).StringSlice()
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("refresh in-flight messages", "err", err)
		}
		return
	}
	for _, j := range running {
		j.kept.Store(true)
	}
	for i := 0; i+1 < len(lost); i += 2 {
		p.mu.Lock()
		j := p.byMsg[lost[i]]
		p.mu.Unlock()
		if j != nil {
			p.entryLost(j, lost[i+1])
		}
	}
}

// entryLost acts on a heartbeat's finding that j's queue entry is not
// pending under this consumer (why: entryOther or entryGone). A job still
// running is abandoned. A finished one whose entry is gone was, in all
// likelihood, acknowledged by its own outcome write, between that write
// and the job being untracked: nothing is wrong. A finished one whose entry
// another consumer holds has its outcome write, if still being retried,
// given up.
func (p *Pool) entryLost(j *job, why string) {
	if j.finishing.Load() {
		if why == entryOther {
			j.lost.Store(true)
		}
		return
	}
	msg := "queue message claimed by another consumer; abandoning job"
	if why == entryGone {
		msg = "queue message no longer pending; abandoning job"
	}
	p.log.Warn(msg, "job_id", j.id, "msg_id", j.msgID)
	j.cancel(&lease.StaleError{Table: jobs.QueueStream, ID: j.msgID})
}

func (p *Pool) pollStatus(ctx context.Context) {
	running := p.tracked()
	if len(running) == 0 {
		return
	}
	pipe := p.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(running))
	for i, j := range running {
		cmds[i] = pipe.HGet(ctx, jobs.JobKey(j.id), "status")
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range cmds {
		st, err := c.Result()
		switch {
		case err == nil && st != jobs.Running && !jobs.IsKnownStatus(st), jobs.IsWrongType(err):
			// Outside the state machine, or no job hash at all: no
			// transition can finish it (see jobs.ErrUnknownStatus).
			running[i].cancel(errUnknownStatus)
		case err == nil && st == jobs.Canceled:
			running[i].cancel(errJobCanceled)
		case errors.Is(err, redis.Nil) || (err == nil && st != jobs.Running):
			// Finished elsewhere, or expired.
			running[i].cancel(errJobGone)
		}
	}
}

// subscribe opens the cancel subscription and waits for its confirmation,
// so a cancel published after the pool starts reading is not missed.
func (p *Pool) subscribe(ctx context.Context) *redis.PubSub {
	ps := p.rdb.PSubscribe(ctx, jobs.CancelPattern)
	if _, err := ps.Receive(ctx); err != nil && ctx.Err() == nil {
		p.log.Warn("subscribe to cancels; relying on the status poll until it reconnects", "err", err)
	}
	return ps
}

// listenCancels cancels running jobs named on job:*:cancel until ctx ends;
// go-redis reconnects the subscription by itself.
func (p *Pool) listenCancels(ctx context.Context, ps *redis.PubSub) {
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			p.cancelJob(m.Payload, errJobCanceled)
		}
	}
}
