package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A job whose events key is not a stream (someone SET it) fails only its
// own event streams, with a stream_error event, whether the key was bad
// when the stream opened or went bad while the shared reader followed it;
// the other jobs' streams sharing that reader keep receiving.
func TestSSEEventsKeyOfWrongTypeFailsOnlyItsStream(t *testing.T) {
	testsvc.EachRedis(t, testSSEEventsKeyOfWrongTypeFailsOnlyItsStream)
}

func testSSEEventsKeyOfWrongTypeFailsOnlyItsStream(t *testing.T) {
	for _, before := range []bool{false, true} {
		name := "goes bad while followed"
		if before {
			name = "bad when the stream opens"
		}
		t.Run(name, func(t *testing.T) {
			s := startServer(t, testSettings())
			ctx := context.Background()
			bad, good := newJob(t, s), newJob(t, s)
			spoil := func() {
				require.NoError(t, s.RDB.Del(ctx, jobs.EventsKey(bad)).Err())
				require.NoError(t, s.RDB.Set(ctx, jobs.EventsKey(bad), "not a stream", time.Minute).Err())
			}
			if before {
				spoil()
			}
			gc := s.events(t, good, nil, "")
			bc := s.events(t, bad, nil, "")
			for _, want := range []string{"hello", "queued"} {
				f, err := gc.next()
				require.NoError(t, err)
				require.Equal(t, want, f.Event)
			}
			f, err := bc.next()
			require.NoError(t, err)
			require.Equal(t, "hello", f.Event)
			if !before {
				f, err = bc.next()
				require.NoError(t, err)
				require.Equal(t, "queued", f.Event)
				spoil()
				// The shared reader meets the bad key only on its next
				// XREAD: another job joining starts one at once.
				other := s.events(t, newJob(t, s), nil, "")
				_, err = other.next()
				require.NoError(t, err)
			}

			ended := bc.rest()
			select {
			case fs := <-ended:
				require.Len(t, fs, 1, "%v", fs)
				assert.Equal(t, "stream_error", fs[0].Event)
				var body struct {
					Code string `json:"code"`
				}
				require.NoError(t, json.Unmarshal([]byte(fs[0].Data), &body))
				assert.Equal(t, "events_not_a_stream", body.Code)
			case <-time.After(3 * time.Second):
				_ = bc.resp.Body.Close()
				t.Fatal("stream of the job with a bad events key still open")
			}

			for i := 1; i <= 3; i++ {
				p := progress(t, s, good, i)
				got := make(chan frame, 1)
				go func() {
					f, err := gc.next()
					if err == nil || err == io.EOF {
						got <- f
					}
				}()
				select {
				case f := <-got:
					require.Equal(t, "progress@"+p, f.Event+"@"+f.ID)
				case <-time.After(3 * time.Second):
					_ = gc.resp.Body.Close()
					t.Fatalf("event %d of the good job not delivered", i)
				}
			}
		})
	}
}
