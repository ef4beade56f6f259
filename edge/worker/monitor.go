package worker

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// refreshScript keeps this consumer's in-flight messages from looking idle:
// for each id still pending under this consumer it resets the idle time
// (XCLAIM ... 0 JUSTID, which does not count a delivery); the ids now owned
// by someone else, or no longer pending, are returned as lost.
//
// KEYS: queue stream. ARGV: consumer, ids...
var refreshScript = redis.NewScript(`
redis.replicate_commands()
local me = ARGV[1]
local lost = {}
for i = 2, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], '` + jobs.Group + `', ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == me then
    redis.call('XCLAIM', KEYS[1], '` + jobs.Group + `', me, 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
`)

// monitor refreshes in-flight messages at a third of ClaimIdle (the lease
// heartbeat rule) and polls the status of running jobs every CancelPoll, a
// safety net for cancel messages lost while pub/sub was reconnecting.
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
			p.refresh(ctx)
		case <-poll.C:
			p.pollStatus(ctx)
		}
	}
}

func (p *Pool) refresh(ctx context.Context) {
	running := p.tracked()
	if len(running) == 0 {
		return
	}
	args := make([]any, 0, len(running)+1)
	args = append(args, p.consumer)
	for _, j := range running {
		args = append(args, j.msgID)
	}
	lost, err := refreshScript.Run(ctx, p.rdb, []string{jobs.QueueStream}, args...).StringSlice()
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("refresh in-flight messages", "err", err)
		}
		return
	}
	for _, id := range lost {
		p.mu.Lock()
		j := p.byMsg[id]
		p.mu.Unlock()
		if j != nil {
			p.log.Warn("queue message claimed by another consumer; abandoning job", "job_id", j.id, "msg_id", id)
			j.cancel(&lease.StaleError{Table: jobs.QueueStream, ID: id})
		}
	}
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
		case errors.Is(err, redis.Nil) || (err == nil && st != jobs.Running):
			// Cancelled, finished elsewhere, or expired.
			running[i].cancel(errJobCanceled)
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
