package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/ship"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// capturingStore is the edge's job store on rdb with sync capture on, for
// tests that run the shipper in this process instead of a built edge.
func capturingStore(rdb *redis.Client) *jobs.Store {
	st := jobs.NewStore(rdb)
	st.Capture = jobs.CaptureStream
	return st
}

// finishedJob creates a job of task on st and runs it to done with result.
func finishedJob(t *testing.T, st *jobs.Store, task string, result json.RawMessage) string {
	t.Helper()
	ctx := context.Background()
	cr, err := st.Create(ctx, jobs.NewJob{Task: task, Payload: json.RawMessage(`{}`), TTL: 600})
	require.NoError(t, err)
	_, err = st.SetRunning(ctx, cr.ID, "worker.start", nil)
	require.NoError(t, err)
	_, err = st.Finish(ctx, cr.ID, jobs.Done, "worker.finish", result, nil, "")
	require.NoError(t, err)
	return cr.ID
}

// shipTo runs a shipper in this process — rdb's capture stream, a real
// spool file — against c until stop (or the test's end); cfg gets c's URL,
// edge id and secret. It returns the shipper and its log.
func (c *central) shipTo(rdb *redis.Client, cfg ship.Config) (sh *ship.Shipper, logs *testsvc.LogBuffer, stop func()) {
	t := c.t
	t.Helper()
	sp, err := spool.Open(context.Background(), filepath.Join(t.TempDir(), spool.File), 64<<20)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sp.Close() })
	cfg.URL, cfg.EdgeID, cfg.Secret = c.URL, c.EdgeID, []byte(c.secret)
	logs = &testsvc.LogBuffer{}
	sh, err = ship.New(slog.New(slog.NewTextHandler(logs, nil)), rdb, sp, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = sh.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-stopped }) }
	t.Cleanup(stop)
	return sh, logs, stop
}

// eventCount is the number of events in want.
func eventCount(want map[string][]event) int {
	n := 0
	for _, w := range want {
		n += len(w)
	}
	return n
}
