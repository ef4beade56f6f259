package ship

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// The heartbeat reports the Redis cap's drops (counted in Redis, so also
// while the spool is not open) beside the spool's own. A heartbeat while
// Redis does not answer is still sent, with the last count read, as the
// metric keeps it.
func TestHeartbeatCarriesRedisCapDrops(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		h, _ := capped(t)
		code, err := h.sh.SendHeartbeat(context.Background())
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, code)
		got := h.rc.Statuses()
		require.Len(t, got, 1)
		assert.Equal(t, int64(15), got[0].RedisDropped)
		assert.Zero(t, got[0].Spool.Dropped, "the spool dropped nothing")

		opts := *h.rdb.Options()
		rdb := redis.NewClient(&opts)
		sh, err := New(nil, rdb, h.sh.Spool(), Config{URL: h.rc.URL, EdgeID: "jetson-1", Secret: []byte(testSecret)})
		require.NoError(t, err)
		_, err = sh.SendHeartbeat(context.Background())
		require.NoError(t, err)
		require.NoError(t, rdb.Close())
		_, err = sh.SendHeartbeat(context.Background())
		require.NoError(t, err, "Redis down: the heartbeat is sent all the same")
		got = h.rc.Statuses()
		require.Len(t, got, 3)
		assert.Equal(t, int64(15), got[2].RedisDropped, "the last count read")
	})
}

// A count in Redis that is not one the cap writes (not a number, or below
// zero: someone SET or DECR it) is no count: the heartbeat, which would
// be refused as invalid with it, and the metric both keep the last count
// read, so the edge is not shown stale for it.
func TestHeartbeatKeepsTheLastCountOverABadOne(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		for _, bad := range []string{"-1", "many"} {
			t.Run(bad, func(t *testing.T) {
				h, _ := capped(t)
				_, err := h.sh.SendHeartbeat(context.Background())
				require.NoError(t, err)
				require.NoError(t, h.rdb.Set(context.Background(), jobs.CaptureDroppedTotal, bad, 0).Err())
				code, err := h.sh.SendHeartbeat(context.Background())
				require.NoError(t, err)
				require.Equal(t, http.StatusNoContent, code)
				got := h.rc.Statuses()
				require.Len(t, got, 2)
				assert.Equal(t, int64(15), got[1].RedisDropped, "the last count read")
			})
		}
	})
}

// olderStatus is the heartbeat as a central older than redis_dropped
// knows it; such a central refuses a body with a field it does not know.
type olderStatus struct {
	EdgeID      string              `json:"edge_id"`
	SentAt      time.Time           `json:"sent_at"`
	Version     string              `json:"version"`
	StartedAt   time.Time           `json:"started_at"`
	UptimeS     int64               `json:"uptime_s"`
	Workers     int                 `json:"workers"`
	Backlog     int64               `json:"backlog"`
	Pending     int64               `json:"pending"`
	DeadLetters int64               `json:"dead_letters"`
	Spool       wire.SpoolStatus    `json:"spool"`
	Library     *wire.LibraryStatus `json:"library,omitempty"`
}

// asOlderCentral makes rc answer heartbeats as a central older than
// redis_dropped does: 400 code for a field it does not know
// (unsupported_format, or invalid_batch from a central older than that).
func asOlderCentral(rc *shiptest.Receiver, refused *int, code string) {
	rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if r.URL.Path != wire.HeartbeatPath {
			return false
		}
		gz, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(gz))
		raw, err := wire.Decompress(gz, wire.MaxBodyBytes)
		if err != nil {
			return false
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&olderStatus{}); err != nil {
			*refused++
			shiptest.Refuse(w, http.StatusBadRequest, code)
			return true
		}
		return false
	})
}

// A central older than the field accepts the heartbeat of an edge that
// never dropped as it is; once the edge has a count to report, the
// refused heartbeat is sent again at once without it, and later ones go
// without it for a while rather than being refused each time.
func TestHeartbeatToACentralOlderThanRedisDropped(t *testing.T) {
	for _, code := range []string{wire.CodeUnsupportedFormat, wire.CodeInvalidBatch} {
		t.Run(code, func(t *testing.T) { heartbeatToOlderCentral(t, code) })
	}
}

func heartbeatToOlderCentral(t *testing.T, refuseWith string) {
	h := newHarness(t, 64<<20, nil)
	var refused int
	asOlderCentral(h.rc, &refused, refuseWith)
	code, err := h.sh.SendHeartbeat(context.Background())
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, code, "no drops: nothing the older central does not know")
	require.Zero(t, refused)

	h.store.CaptureMax = 1
	h.jobs(1, 3, `{"text":"tok"}`)
	for i := 0; i < 3; i++ {
		code, err = h.sh.SendHeartbeat(context.Background())
		require.NoError(t, err, "heartbeat %d", i)
		require.Equal(t, http.StatusNoContent, code)
	}
	assert.Equal(t, 1, refused, "refused once, then left out")
	assert.Len(t, h.rc.Statuses(), 4)
	assert.Equal(t, 1, strings.Count(h.logs.String(), "refused the heartbeat's redis_dropped"), "said once")

	// Past the hour the edge tries the field again: an upgraded central
	// stores it.
	h.rc.SetHook(nil)
	h.sh.olderCentral.Store(time.Now().Add(-time.Second).UnixNano())
	_, err = h.sh.SendHeartbeat(context.Background())
	require.NoError(t, err)
	st := h.rc.Statuses()
	assert.Equal(t, int64(3), st[len(st)-1].RedisDropped)
}
