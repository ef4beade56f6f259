package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Backlog counts the queue entries the workers have not finished:
// undelivered entries plus pending (delivered, unacknowledged) ones, up to
// limit+1 (a count above limit is all backpressure needs to know).
//
// Redis 7 reports the undelivered count as the group's "lag", or it is
// read from its counters when it reports none (see byCounters); on Redis
// 6.0, and on 7 when neither tells, it is the stream's length less the
// entries at or before the group's last-delivered-id (see undelivered).
// The server version is detected once.
func (s *Store) Backlog(ctx context.Context, limit int64) (int64, error) {
	groups, err := s.rdb.XInfoGroups(ctx, QueueStream).Result()
	if err != nil {
		if isNoStream(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("backlog: %w", err)
	}
	var g *redis.XInfoGroup
	for i := range groups {
		if groups[i].Name == Group {
			g = &groups[i]
		}
	}
	if g == nil {
		// No worker group yet: every entry is undelivered.
		n, err := s.rdb.XLen(ctx, QueueStream).Result()
		if err != nil {
			return 0, fmt.Errorf("backlog: %w", err)
		}
		return n, nil
	}
	if g.Pending > limit {
		return g.Pending, nil
	}
	if s.hasLag(ctx) {
		if g.Lag >= 0 {
			return g.Pending + g.Lag, nil
		}
		n, ok, err := s.byCounters(ctx)
		if err != nil {
			return 0, err
		}
		if ok {
			return n, nil
		}
	}
	n, err := s.undelivered(ctx, g.LastDeliveredID, g.Pending, limit-g.Pending+1)
	if err != nil {
		return 0, err
	}
	return g.Pending + n, nil
}

// byCounters is the backlog from Redis 7's stream counters, for when XINFO
// GROUPS reports no lag. Redis gives none as soon as an entry at or after
// the group's last-delivered-id was deleted, which our workers do
// whenever the entry delivered last is also the last one finished; its
// counters still tell the undelivered count exactly while no deletion is
// after that id: the entries added after it, entries-added less the
// group's entries-read. Workers of another implementation, which
// acknowledge without deleting, leave entries before the group's position
// that would make undelivered fetch the undelivered entries themselves
// (payloads and all) to count them. ok is false when the counters cannot
// tell (no entries-read, or a deletion after the group's position).
// Group and stream are read in one MULTI, so both see the same stream.
func (s *Store) byCounters(ctx context.Context) (n int64, ok bool, err error) {
	var groups *redis.XInfoGroupsCmd
	var info *redis.XInfoStreamCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		groups = p.XInfoGroups(ctx, QueueStream)
		info = p.XInfoStream(ctx, QueueStream)
		return nil
	})
	if err != nil {
		if isNoStream(err) {
			return 0, true, nil
		}
		return 0, false, fmt.Errorf("backlog: %w", err)
	}
	var g *redis.XInfoGroup
	for i, gr := range groups.Val() {
		if gr.Name == Group {
			g = &groups.Val()[i]
		}
	}
	if g == nil {
		return 0, false, nil
	}
	if g.Lag >= 0 {
		return g.Pending + g.Lag, true, nil
	}
	// go-redis reads a null entries-read as 0, which a group that has
	// read anything never has.
	if g.EntriesRead <= 0 {
		return 0, false, nil
	}
	st := info.Val()
	last, err := ParseStreamID(g.LastDeliveredID)
	if err != nil {
		return 0, false, fmt.Errorf("backlog: group last-delivered-id %q: %w", g.LastDeliveredID, err)
	}
	deleted, err := ParseStreamID(st.MaxDeletedEntryID)
	if err != nil || last.Less(deleted) {
		return 0, false, nil
	}
	// Trimming is not recorded as a deletion; it takes the oldest entries
	// first, so the stream's length bounds what it left after the group.
	n = min(max(st.EntriesAdded-g.EntriesRead, 0), st.Length)
	return g.Pending + n, true, nil
}

// behindSlack is how many entries at or before the group's position,
// beyond the pending ones, undelivered fetches before giving up on
// subtracting them.
const behindSlack = 64

// aheadFirst is how far max may exceed the pending count for undelivered
// to fetch the entries after the group's position straight away: the
// count from behind costs at least the pending entries, and with kept
// acknowledged entries pending+behindSlack, while fetching ahead costs at
// most max. It covers the sync shipper's check (limit 1, every 200 ms),
// which asks only whether anything waits.
const aheadFirst = 2

// undelivered counts the entries after lastDelivered without fetching
// them: every entry comes back with its payload (up to the body limit), and
// the undelivered ones are the whole backlog. The workers delete each entry
// they finish, so what lies at or before lastDelivered is the pending
// entries and little else; those are fetched (up to pending+behindSlack)
// and subtracted from XLEN, in one MULTI so both see the same stream.
// Workers that acknowledge without deleting (another implementation of the
// contract) leave more there; the entries after lastDelivered are then
// fetched instead, up to max, which is all the limit needs. When max is
// hardly above the pending count (see aheadFirst) those are fetched first.
func (s *Store) undelivered(ctx context.Context, lastDelivered string, pending, max int64) (int64, error) {
	if max < 1 {
		max = 1
	}
	id, err := ParseStreamID(lastDelivered)
	if err != nil {
		return 0, fmt.Errorf("backlog: group last-delivered-id %q: %w", lastDelivered, err)
	}
	if id == (StreamID{}) {
		n, err := s.rdb.XLen(ctx, QueueStream).Result()
		if err != nil {
			return 0, fmt.Errorf("backlog: %w", err)
		}
		return n, nil
	}
	if max <= pending+aheadFirst {
		return s.countAfter(ctx, id, max)
	}
	behindMax := pending + behindSlack
	var length *redis.IntCmd
	var behind *redis.XMessageSliceCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		length = p.XLen(ctx, QueueStream)
		behind = p.XRangeN(ctx, QueueStream, "-", id.String(), behindMax)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("backlog: %w", err)
	}
	if n := int64(len(behind.Val())); n < behindMax {
		return length.Val() - n, nil
	}
	return s.countAfter(ctx, id, max)
}

// countPage is how many entries countAfter fetches at once: each comes
// with its payload, up to 200 KB, so a page holds at most 20 MB.
const countPage = 100

// countAfter counts the entries after id, up to max, a page at a time: a
// caller with no limit (the console, /metrics) would otherwise hold every
// undelivered entry, payload and all, in one reply. Pages are not one
// snapshot; the count is as exact as the stream is still.
func (s *Store) countAfter(ctx context.Context, id StreamID, max int64) (int64, error) {
	var n int64
	for n < max {
		page := min(max-n, countPage)
		msgs, err := s.rdb.XRangeN(ctx, QueueStream, id.Next().String(), "+", page).Result()
		if err != nil {
			return 0, fmt.Errorf("backlog: %w", err)
		}
		n += int64(len(msgs))
		if int64(len(msgs)) < page {
			break
		}
		if id, err = ParseStreamID(msgs[len(msgs)-1].ID); err != nil {
			return 0, fmt.Errorf("backlog: entry id %q: %w", msgs[len(msgs)-1].ID, err)
		}
	}
	return n, nil
}

// ForceRange makes Backlog use the Redis 6.0 XRANGE path whatever the
// server version; tests use it to cover that path on newer servers.
func (s *Store) ForceRange() { s.lagMode.Store(lagAbsent) }

const (
	lagUnknown int32 = iota
	lagPresent
	lagAbsent
)

func (s *Store) hasLag(ctx context.Context) bool {
	switch s.lagMode.Load() {
	case lagPresent:
		return true
	case lagAbsent:
		return false
	}
	info, err := s.rdb.Info(ctx, "server").Result()
	if err != nil {
		return false
	}
	major := 0
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			_, _ = fmt.Sscanf(v, "%d", &major)
		}
	}
	mode := lagAbsent
	if major >= 7 {
		mode = lagPresent
	}
	s.lagMode.CompareAndSwap(lagUnknown, mode)
	return mode == lagPresent
}

func isNoStream(err error) bool {
	return errors.Is(err, redis.Nil) || (err != nil && strings.Contains(err.Error(), "no such key"))
}
