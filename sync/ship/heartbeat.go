package ship

import (
	"context"
	"net/http"
	"time"

	"github.com/vesta-cx/euterpe/sync/wire"
)

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
	return st
}

// SendHeartbeat posts the status once and returns central's status code.
// A clock_skew answer corrects the signing clock like a batch's does.
func (s *Shipper) SendHeartbeat(ctx context.Context) (int, error) {
	st := s.Status(ctx)
	body, err := wire.EncodeStatus(st)
	if err != nil {
		return 0, err
	}
	gz := s.compress(body)
	code, hdr, resp, err := s.post(ctx, wire.HeartbeatPath, gz, func(req *http.Request) error {
		return wire.SignHeartbeat(req, st.SentAt, st, gz, s.cfg.Secret)
	})
	if err != nil {
		return 0, err
	}
	if classify(code, errorCode(resp)) == actClockSkew {
		if date, err := http.ParseTime(hdr.Get("Date")); err == nil {
			s.offset.Store(int64(date.Sub(s.cfg.Now())))
		}
	}
	if code/100 != 2 {
		return code, &statusError{code: code}
	}
	return code, nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "central answered " + http.StatusText(e.code) }
