package ship

import (
	"context"

	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// recordDrops moves the drops of the capture stream's cap (deltas the
// scripts kept out of Redis) into the spool as gaps, for central. The
// order is what keeps them: take them aside in Redis, commit them to the
// spool, and only then release them in Redis. A failure or a crash
// between two steps leaves them taken, and the next move takes the same
// ones again: the spool skips a gap it holds, and one central accepted
// meanwhile goes out again under its gap id, which central deduplicates.
func (s *Shipper) recordDrops(ctx context.Context) error {
	drops, bad, aside, err := jobs.TakeDrops(ctx, s.rdb, jobs.CaptureStream)
	if err != nil {
		return err
	}
	// Each key set aside is a new one, so each is logged: nothing else
	// says that drops may have been lost or where to look.
	for _, a := range aside {
		s.log.Error("sync: a key of the capture stream's drops held another type than the hash the scripts write; it was renamed and kept for inspection (delete it once read), and drops are taken again",
			"key", a.Key, "type", a.Type, "kept_as", a.Name)
	}
	if len(drops)+bad == 0 {
		s.clear("redisdrop")
		return nil
	}
	if _, err := s.Spool().AddGaps(ctx, gapsOf(drops)); err != nil {
		return err
	}
	if err := jobs.ReleaseDrops(ctx, s.rdb, jobs.CaptureStream); err != nil {
		return err
	}
	var n int64
	for _, d := range drops {
		n += d.Count
	}
	s.once("redisdrop", func() {
		s.log.Warn("sync: the capture stream in Redis reached its cap (EUTERPE_SYNC_REDIS_MAX_EVENTS); delta events were not captured and are reported to central as gaps",
			"stream", jobs.CaptureStream, "jobs", len(drops), "dropped", n, "unreadable_records", bad)
	})
	return nil
}

// gapsOf is drops as the spool's gaps.
func gapsOf(drops []jobs.Drop) []spool.Gap {
	out := make([]spool.Gap, len(drops))
	for i, d := range drops {
		out[i] = spool.Gap{JobID: d.JobID, Type: jobs.CaptureDroppable, Count: d.Count,
			FirstEntry: d.FirstEntry, LastEntry: d.LastEntry, FirstTS: d.FirstTS, LastTS: d.LastTS}
	}
	return out
}
