package ship

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// olderCentralFor is how long heartbeats leave out redis_dropped after a
// central refused it: long enough that an older central is not sent a
// heartbeat it refuses every time, short enough that an upgraded one
// gets the count within the hour.
const olderCentralFor = time.Hour

// heartbeatLoop sends the status every Heartbeat, the first one at once.
func (s *Shipper) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		if _, err := s.SendHeartbeat(ctx); err != nil && ctx.Err() == nil {
			s.once("heartbeat", func() { s.log.Debug("sync: heartbeat not delivered", "err", err) })
		} else {
			s.clear("heartbeat")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Status is the heartbeat the shipper would send now.
func (s *Shipper) Status(ctx context.Context) wire.Status {
	var st wire.Status
	if s.cfg.Status != nil {
		st = s.cfg.Status(ctx)
	}
	now := s.signNow()
	st.EdgeID = s.cfg.EdgeID
	st.SentAt = now.UTC()
	// Uptime is read on the process's monotonic clock and the start time
	// derived from the signing clock: the edge's own clock at start may
	// have been hours off, and NTP setting it right since moves neither.
	up := time.Since(s.started)
	st.StartedAt = now.Add(-up).UTC()
	st.UptimeS = int64(up / time.Second)
	if sp := s.Spool(); sp != nil { // not open yet: reported as 0
		ss, _ := sp.Stats(ctx)
		st.Spool = wire.SpoolStatus{Events: ss.Events, Bytes: ss.Bytes, OldestTS: ss.OldestTS,
			Dropped: sp.Dropped(), Quarantined: ss.Quarantined}
	}
	st.RedisDropped = redisDroppedTotal(ctx, s.rdb, &s.redisDropped)
	return st
}

// redisDroppedTotal is the capture cap's drop count read from Redis, kept
// in last; while Redis does not answer (or the count is not a number) it
// is the last count read, so a report never falls back to 0 and up again,
// which would read as a reset. A count below zero is no count the cap
// writes (someone SET or DECR it) and is taken as unreadable too: a
// heartbeat carrying it fails validation and would not be sent at all.
// It waits for Redis at most 2 s.
func redisDroppedTotal(ctx context.Context, rdb redis.UniversalClient, last *atomic.Int64) int64 {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if n, err := jobs.DroppedTotal(ctx, rdb, jobs.CaptureStream); err == nil && n >= 0 {
		last.Store(n)
	}
	return last.Load()
}

// SendHeartbeat posts the status once and returns central's status code.
// A clock_skew answer corrects the signing clock like a batch's does.
//
// A central older than redis_dropped refuses a heartbeat carrying it (it
// refuses unknown fields), and the heartbeat is what keeps an idle edge
// from being shown stale. So a heartbeat with the field that central
// refuses as invalid is sent again at once without it, and when that one
// is accepted, heartbeats leave the field out for olderCentralFor.
func (s *Shipper) SendHeartbeat(ctx context.Context) (int, error) {
	st := s.Status(ctx)
	if st.RedisDropped != 0 && s.cfg.Now().UnixNano() < s.olderCentral.Load() {
		st.RedisDropped = 0
	}
	code, resp, err := s.postStatus(ctx, st)
	if err == nil && st.RedisDropped != 0 && refusedAsNewer(code, errorCode(resp)) {
		plain := st
		plain.RedisDropped = 0
		if code, _, err = s.postStatus(ctx, plain); err == nil && code/100 == 2 {
			s.olderCentral.Store(s.cfg.Now().Add(olderCentralFor).UnixNano())
			s.once("oldercentral", func() {
				s.log.Info("sync: central refused the heartbeat's redis_dropped (central is older than this edge) and accepted it without; the Redis cap's drops still reach it as gaps",
					"redis_dropped", st.RedisDropped, "retry_in", olderCentralFor)
			})
		}
	} else if err == nil && code/100 == 2 && st.RedisDropped != 0 {
		s.clear("oldercentral")
	}
	if err != nil {
		return 0, err
	}
	if code/100 != 2 {
		return code, &statusError{code: code}
	}
	return code, nil
}

// refusedAsNewer reports whether central's answer to a heartbeat may be
// its refusal of a field it does not know: unsupported_format, or
// invalid_batch from a central older than that code.
func refusedAsNewer(status int, code string) bool {
	return status == http.StatusBadRequest && (code == wire.CodeUnsupportedFormat || code == wire.CodeInvalidBatch)
}

// postStatus signs and posts st once and returns central's status code
// and answer.
func (s *Shipper) postStatus(ctx context.Context, st wire.Status) (int, []byte, error) {
	body, err := wire.EncodeStatus(st)
	if err != nil {
		return 0, nil, err
	}
	gz := s.compress(body)
	code, hdr, resp, err := s.post(ctx, wire.HeartbeatPath, gz, func(req *http.Request) error {
		return wire.SignHeartbeat(req, st.SentAt, st, gz, s.cfg.Secret)
	})
	if err != nil {
		return 0, nil, err
	}
	if classify(code, errorCode(resp)) == actClockSkew {
		if date, err := http.ParseTime(hdr.Get("Date")); err == nil {
			s.offset.Store(int64(date.Sub(s.cfg.Now())))
		}
	}
	return code, resp, nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "central answered " + http.StatusText(e.code) }
