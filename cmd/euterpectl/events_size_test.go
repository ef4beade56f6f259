package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A done event carries the job's whole result on one data line: one far
// past the scanner's default fits, and one past the cap of an edge answer
// fails at once naming the cap, instead of being asked for again from the
// same cursor until the retries run out.
func TestEventsOfLargeResult(t *testing.T) {
	const jobID = "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d"
	cases := []struct {
		name    string
		pad     int // bytes of the result's one string
		code    int
		printed bool
		errWant string
	}{
		{"over 4 MiB", 6 << 20, 0, true, ""},
		{"over the cap", maxEdgeAnswer + 1, 1, false, fmt.Sprintf("over %d MiB", maxEdgeAnswer>>20)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var streams atomic.Int64
			head := `{"type":"done","result":{"pad":"`
			tail := `"}}`
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/jobs/"+jobID+"/events" {
					http.NotFound(w, r)
					return
				}
				streams.Add(1)
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = fmt.Fprintf(w, "event: hello\ndata: {\"job_id\":%q}\n\nid: 1-0\nevent: done\ndata: %s", jobID, head)
				chunk := strings.Repeat("x", 1<<20)
				for left := c.pad; left > 0; left -= len(chunk) {
					if left < len(chunk) {
						chunk = chunk[:left]
					}
					if _, err := io.WriteString(w, chunk); err != nil {
						return
					}
				}
				_, _ = io.WriteString(w, tail+"\n\n")
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			code, out, errOut := runCtlCtx(ctx, nil, "jobs", "events", "--server", srv.URL, jobID)
			require.Equal(t, c.code, code, errOut)
			assert.Equal(t, int64(1), streams.Load(), "streams opened")
			if c.printed {
				require.Equal(t, len(head)+c.pad+len(tail)+1, len(out))
				assert.True(t, strings.HasPrefix(out, head) && strings.HasSuffix(out, tail+"\n"))
				assert.Empty(t, errOut)
				return
			}
			assert.Empty(t, out)
			assert.Contains(t, errOut, c.errWant)
			assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		})
	}
}
