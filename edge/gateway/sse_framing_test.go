package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// dispatched parses an event stream the way the HTML standard tells a
// browser to: lines end at CRLF, LF or a lone CR, a blank line dispatches
// the event, data lines are joined with LF, and the last event id is kept
// across events.
func dispatched(body string) []frame {
	var out []frame
	var f frame
	var data []string
	lastID := ""
	for _, line := range regexp.MustCompile(`\r\n|\r|\n`).Split(body, -1) {
		if line == "" {
			if data != nil {
				f.ID, f.Data = lastID, strings.Join(data, "\n")
				if f.Event == "" {
					f.Event = "message"
				}
				out = append(out, f)
			}
			f, data = frame{}, nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			f.Event = value
		case "data":
			data = append(data, value)
		case "id":
			lastID = value
		}
	}
	return out
}

// Another implementation of the worker side writes event types the
// gateway never checked. One carrying CR or LF must not become frames of
// its own (a forged "done" that ends the stream early, a forged id that
// moves the client's resume point): its frame stays one frame, under a name
// no real type has, and its data still carries the type as written.
func TestSSEEventTypeCannotBreakFraming(t *testing.T) {
	testsvc.EachRedis(t, testSSEEventTypeCannotBreakFraming)
}

func testSSEEventTypeCannotBreakFraming(t *testing.T) {
	s := startServer(t, testSettings())
	ctx := context.Background()
	forged := "progress\r\n\r\nid: 99999999999999-0\revent: done\ndata: {}\n"
	// run writes the odd event between "running" and "done".
	run := func(id string) string {
		_, err := s.Store.SetRunning(ctx, id, "worker.start", nil)
		require.NoError(t, err)
		eid, err := s.RDB.XAdd(ctx, &redis.XAddArgs{Stream: jobs.EventsKey(id), Values: map[string]any{
			"type": forged, "ts": "1700000000000", "step": "worker.step", "data": `{"n":1}`,
		}}).Result()
		require.NoError(t, err)
		_, err = s.Store.Finish(ctx, id, jobs.Done, "worker.done", json.RawMessage(`{}`), nil, "")
		require.NoError(t, err)
		return eid
	}
	id := newJob(t, s)
	stored := run(id)

	for _, live := range []bool{false, true} {
		name := "finished at connect"
		if live {
			name = "followed live"
		}
		t.Run(name, func(t *testing.T) {
			jid, eid := id, stored
			if live {
				jid = newJob(t, s)
			}
			resp, err := http.Get(s.URL + "/v1/jobs/" + jid + "/events")
			require.NoError(t, err)
			defer resp.Body.Close()
			if live {
				eid = run(jid)
			}
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			fs := dispatched(string(body))
			require.Len(t, fs, 5, "hello, queued, running, the odd event and done:\n%s", body)
			assert.Equal(t, []string{"hello", "queued", "running"}, []string{fs[0].Event, fs[1].Event, fs[2].Event})
			odd := fs[3]
			assert.NotContains(t, []string{"done", "error", "canceled"}, odd.Event)
			assert.NotContains(t, odd.Event, "\r")
			assert.NotContains(t, odd.Event, "\n")
			assert.Equal(t, eid, odd.ID)
			var ev jobs.Event
			require.NoError(t, json.Unmarshal([]byte(odd.Data), &ev))
			assert.Equal(t, forged, ev.Type, "the data carries the type as stored")
			assert.Equal(t, "done", fs[4].Event)
			assert.NotEqual(t, "99999999999999-0", fs[4].ID)
		})
	}
}
