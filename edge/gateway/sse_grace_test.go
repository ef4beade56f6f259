package gateway_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// While a stream waits out the grace for a terminal event that a two-step
// writer has not stored (its hash is terminal already), it waits on the
// shared reader, not by reading the job's events itself over and over:
// many clients watching such a job must not each keep the shared pool
// busy for the whole grace. Each still ends once the grace is over.
func TestSSETerminalGraceWaitsOnSharedReader(t *testing.T) {
	testsvc.EachRedis(t, testSSETerminalGraceWaitsOnSharedReader)
}

func testSSETerminalGraceWaitsOnSharedReader(t *testing.T) {
	const clients = 20
	tests := []struct {
		name    string
		connect bool // the hash is terminal when the streams open
	}{
		{"terminal when the streams open", true},
		{"terminal seen at a heartbeat", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := testSettings()
			set.Heartbeat = 50 * time.Millisecond
			// Commands whose first key is the job's events key, once set.
			var key atomic.Pointer[string]
			counter := &testsvc.CommandCounter{Match: func(cmd redis.Cmder) bool {
				args, k := cmd.Args(), key.Load()
				return k != nil && len(args) > 1 && fmt.Sprint(args[1]) == *k
			}}
			s := startHookedServer(t, set, nil, counter)
			ctx := context.Background()
			id := newJob(t, s)
			_, err := s.Store.SetRunning(ctx, id, "foreign.start", nil)
			require.NoError(t, err)
			events := jobs.EventsKey(id)
			key.Store(&events)
			finish := func() {
				require.NoError(t, s.RDB.HSet(ctx, jobs.JobKey(id), "status", jobs.Done).Err())
			}
			if tc.connect {
				finish()
			}
			var wg sync.WaitGroup
			ended := make([][]frame, clients)
			cls := make([]*sseClient, clients)
			for i := range cls {
				cls[i] = s.events(t, id, nil, "")
				for _, want := range []string{"hello", "queued", "running"} {
					f, err := cls[i].next()
					require.NoError(t, err)
					require.Equal(t, want, f.Event)
				}
			}
			start := time.Now()
			if !tc.connect {
				finish()
			}
			for i, c := range cls {
				wg.Go(func() {
					for {
						f, err := c.next()
						if err != nil {
							return
						}
						ended[i] = append(ended[i], f)
					}
				})
			}
			wg.Wait()
			took := time.Since(start)
			for i, fs := range ended {
				assert.Empty(t, fs, "client %d", i)
			}
			assert.Less(t, took, 6*time.Second, "streams not ended after the grace")
			// A stream that polled would read the events some 40 times
			// each during the 2 s grace.
			assert.LessOrEqual(t, counter.N(), int64(4*clients), "commands on the events key")
		})
	}
}
