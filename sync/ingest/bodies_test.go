package ingest

import (
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/sync/wire"
)

// Signed bodies that are no batch or status are refused 400 invalid_batch,
// which the shipper sets aside, and logged at info: not 503 unavailable,
// which it would retry for ever, and not stored. An identity body whose
// top-level event_id differs from x-euterpe-event-id fails the verifier's
// event id check; a valid status or batch followed by closing brackets
// once passed the decoder, and the heartbeat was stored as unparsable
// text.
func TestSignedBodiesThatAreNoBatchAreInvalid(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		db := openURL(t, url)
		s := startServer(t, db)
		edge, secret := s.register("jetson-1")
		now := time.Now()
		identity := func(path, body string) signed {
			u := signRaw(t, path, edge, []byte(body), secret, now)
			u.header.Del("Content-Encoding")
			return u
		}
		status, err := wire.EncodeStatus(wire.Status{EdgeID: edge, SentAt: now.UTC(), Version: "v1", StartedAt: now.UTC(), Backlog: 7})
		if err != nil {
			t.Fatal(err)
		}
		batch, err := wire.Encode(wire.Batch{EdgeID: edge, SentAt: now, Events: events(edge, "job-1", 1700000000000, "queued")})
		if err != nil {
			t.Fatal(err)
		}
		before := written(t, db)
		for _, tc := range []struct {
			name string
			req  signed
		}{
			{"heartbeat with another event_id", identity(wire.HeartbeatPath, `{"event_id":"other"}`)},
			{"batch with another event_id", identity(wire.BatchPath, `{"event_id":"other","edge_id":"`+edge+`"}`)},
			{"batch with an event_id not a string", identity(wire.BatchPath, `{"event_id":1}`)},
			{"heartbeat with closers after it", signRaw(t, wire.HeartbeatPath, edge, wire.Compress(append(status, "]]}"...)), secret, now)},
			{"identity heartbeat with a closer after it", identity(wire.HeartbeatPath, string(status)+"}")},
			{"batch with closers after it", signRaw(t, wire.BatchPath, edge, wire.Compress(append(batch, "]}"...)), secret, now)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				refused := counterValue(s.role.Metrics.Refused.WithLabelValues(wire.CodeInvalidBatch))
				res := s.send(tc.req)
				if res.status != 400 || res.code() != wire.CodeInvalidBatch || res.header.Get("Retry-After") != "" {
					t.Fatalf("got %d %s (Retry-After %q), want 400 %s", res.status, res.body, res.header.Get("Retry-After"), wire.CodeInvalidBatch)
				}
				if got := counterValue(s.role.Metrics.Refused.WithLabelValues(wire.CodeInvalidBatch)); got != refused+1 {
					t.Fatalf("refused{invalid_batch} %v -> %v", refused, got)
				}
				if got := written(t, db); got != before {
					t.Fatalf("refusal wrote: %v -> %v", before, got)
				}
			})
		}
		if v := counterValue(s.role.Metrics.Refused.WithLabelValues("unavailable")); v != 0 {
			t.Fatalf("refused{unavailable} = %v", v)
		}
		if logs := s.logs.String(); strings.Contains(logs, `"level":"WARN"`) || !strings.Contains(logs, "sync request refused") {
			t.Fatalf("want info refusals and no warning:\n%s", logs)
		}
		var v EdgeView
		s.get("/v1/edges/"+edge, &v)
		if v.Status != nil || v.LastSeenAt != nil {
			t.Fatalf("a refused heartbeat was stored: %+v", v)
		}
	})
}
