package console_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Error text the console shows comes from jobs, dead letters and backends
// it does not control (a worker of another implementation writes what it
// likes); each piece is cut to daemon.MaxMessage like every other stored
// or returned error message, and the job page's error stays JSON.
func TestConsoleCapsErrorText(t *testing.T) {
	rdb, _ := testsvc.Redis(t)
	store := jobs.NewStore(rdb)
	ctx := context.Background()
	e := mounted(t, store)
	long := strings.Repeat("x", 5000)

	jobWith := func(errField string) string {
		cr, err := store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
		require.NoError(t, err)
		require.NoError(t, rdb.HSet(ctx, jobs.JobKey(cr.ID), "status", jobs.Error, "error", errField).Err())
		return cr.ID
	}
	objErr, _ := json.Marshal(map[string]any{"code": "backend_error", "message": long, "status": 502})
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: jobs.DeadStream, Values: []any{
		"job_id", "j", "task", "chat", "payload", "{}", "reason", long, "deliveries", "9", "consumer", "w", "ts", "1"}}).Err())

	tests := []struct {
		name  string
		path  string
		block *regexp.Regexp // the element holding the error text
		json  bool
	}{
		{"job error object", "/ui/jobs/" + jobWith(string(objErr)), regexp.MustCompile(`(?s)<pre id="error">(.*?)</pre>`), true},
		{"job error not JSON", "/ui/jobs/" + jobWith(long), regexp.MustCompile(`(?s)<pre id="error">(.*?)</pre>`), true},
		{"dead letter reason", "/ui/queue", regexp.MustCompile(`(?s)<table id="dead">.*?<td>chat</td><td>(.*?)</td>`), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			require.Equal(t, http.StatusOK, rec.Code)
			m := tc.block.FindStringSubmatch(rec.Body.String())
			require.NotNil(t, m, "no error element in %s", rec.Body.String())
			text := html.UnescapeString(m[1])
			assert.Contains(t, text, strings.Repeat("x", 100))
			assert.NotContains(t, text, strings.Repeat("x", daemon.MaxMessage+1))
			if tc.json {
				assert.True(t, json.Valid([]byte(text)), "%s", text)
			}
		})
	}
}
