package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// pruneScript deletes one consumer of the group, only if it still has no
// pending entries and has been idle for at least the given time when the
// script runs: the Go side lists candidates with XINFO CONSUMERS, and a
// consumer that came back (or was handed entries by XCLAIM) in between
// must not lose them — XGROUP DELCONSUMER drops a consumer's pending
// entries from the group for good. It returns 1 when deleted, 0 when kept,
// -1 when the consumer no longer exists.
//
// KEYS: queue stream. ARGV: consumer, min idle (ms).
var pruneScript = redis.NewScript(`
redis.replicate_commands()
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], '` + jobs.Group + `')) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] == ARGV[1] then
    if tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[2]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], '` + jobs.Group + `', ARGV[1])
      return 1
    end
    return 0
  end
end
return -1
`)

// pruneLoop removes dead consumers every PruneInterval, and once at start.
func (p *Pool) pruneLoop(ctx context.Context) {
	t := time.NewTicker(p.s.PruneInterval)
	defer t.Stop()
	for {
		if _, err := p.pruneConsumers(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("remove idle consumers", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pruneConsumers deletes the group's consumers that have no pending entries
// and were idle for at least ConsumerMaxIdle, other than this pool's own
// (idle while it has nothing to do on some servers' accounting, and about
// to read again). A consumer with pending entries is never deleted, however
// old: the entries would leave the group unacknowledged; recovery claims
// them, and the emptied consumer goes in a later round. It returns the
// names deleted.
func (p *Pool) pruneConsumers(ctx context.Context) ([]string, error) {
	infos, err := p.rdb.XInfoConsumers(ctx, jobs.QueueStream, jobs.Group).Result()
	if err != nil {
		return nil, fmt.Errorf("XINFO CONSUMERS: %w", err)
	}
	var gone []string
	for _, c := range infos {
		if c.Name == p.consumer || c.Pending > 0 || c.Idle < p.s.ConsumerMaxIdle {
			continue
		}
		ok, err := p.deleteConsumer(ctx, c.Name)
		if err != nil {
			return gone, err
		}
		if ok {
			gone = append(gone, c.Name)
			p.log.Info("removed idle consumer", "removed", c.Name, "idle", c.Idle.Round(time.Second).String())
		}
	}
	return gone, nil
}

// deleteConsumer deletes name if, checked atomically with the delete, it
// has no pending entries and has been idle for ConsumerMaxIdle.
func (p *Pool) deleteConsumer(ctx context.Context, name string) (bool, error) {
	if name == p.consumer {
		return false, nil
	}
	n, err := pruneScript.Run(ctx, p.rdb, []string{jobs.QueueStream}, name, p.s.ConsumerMaxIdle.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("delete consumer %s: %w", name, err)
	}
	return n == 1, nil
}
