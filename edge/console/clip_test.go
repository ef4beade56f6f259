package console_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/console"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Payloads, results and errors come from clients and from workers of any
// implementation, and nothing bounds what a worker stores: the pages show
// the start of each (console.PageText bytes, cut at a rune boundary,
// escaped) and say how large the whole is, instead of rendering megabytes.
func TestConsoleCapsLargeFields(t *testing.T) {
	rdb, _ := testsvc.Redis(t)
	store := jobs.NewStore(rdb)
	ctx := context.Background()
	e := mounted(t, store)

	// Runes of 3 and 4 bytes, so some cut falls inside one, and markup
	// that must stay text.
	big := func(n int) string {
		return `{"q":"<script>alert(1)</script>` + strings.Repeat("€😀", n/7) + `"}`
	}
	manyStrings, _ := json.Marshal(map[string]any{"code": "backend_error", "details": strings.Split(strings.Repeat("error text,", 50_000), ",")})
	jobWith := func(field, value string) string {
		cr, err := store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
		require.NoError(t, err)
		require.NoError(t, rdb.HSet(ctx, jobs.JobKey(cr.ID), field, value).Err())
		return cr.ID
	}
	deadPayload := big(3 << 20)
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: jobs.DeadStream, Values: []any{
		"job_id", "j", "task", "chat", "payload", deadPayload, "reason", "r", "deliveries", "9", "consumer", "w", "ts", "1"}}).Err())

	tests := []struct {
		name  string
		path  string
		block *regexp.Regexp
		size  int
	}{
		{"job payload", "/ui/jobs/" + jobWith("payload", big(3<<20)), regexp.MustCompile(`(?s)<pre id="payload">(.*?)</pre>`), len(big(3 << 20))},
		{"job payload to indent", "/ui/jobs/" + jobWith("payload", big(6000)), regexp.MustCompile(`(?s)<pre id="payload">(.*?)</pre>`), 0},
		{"job result", "/ui/jobs/" + jobWith("result", big(2<<20)), regexp.MustCompile(`(?s)<pre id="result">(.*?)</pre>`), 0},
		{"job result not JSON", "/ui/jobs/" + jobWith("result", "\xff"+big(2<<20)), regexp.MustCompile(`(?s)<pre id="result">(.*?)</pre>`), 0},
		{"job error of many strings", "/ui/jobs/" + jobWith("error", string(manyStrings)), regexp.MustCompile(`(?s)<pre id="error">(.*?)</pre>`), 0},
		{"dead letter payload", "/ui/queue", regexp.MustCompile(`(?s)<table id="dead">.*?<pre>(.*?)</pre>`), len(deadPayload)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			require.Equal(t, http.StatusOK, rec.Code)
			body := rec.Body.String()
			assert.Less(t, len(body), 64<<10, "page size")
			assert.NotContains(t, body, "<script>alert")
			m := tc.block.FindStringSubmatch(body)
			require.NotNil(t, m, "no element in %.2000s", body)
			text := html.UnescapeString(m[1])
			assert.True(t, utf8.ValidString(text), "valid UTF-8")
			assert.NotContains(t, text, "\uFFFD\uFFFD", "a rune cut in half")
			assert.LessOrEqual(t, len(text), console.PageText+200)
			assert.True(t, strings.Contains(text, "truncated"), "no truncation mark")
			if tc.size > 0 {
				assert.True(t, strings.Contains(text, strconv.Itoa(tc.size)+" bytes"), "no size in %q", text[max(0, len(text)-200):])
			}
		})
	}
}

// Job ids, tasks, statuses and consumer names shown in lists come from
// Redis as any worker wrote them; each is capped like an error message,
// so no field makes a page megabytes long.
func TestConsoleCapsListFields(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		rdb, _ := testsvc.Redis(t)
		store := jobs.NewStore(rdb)
		ctx := context.Background()
		e := mounted(t, store)
		long := strings.Repeat("y", 200_000)

		cr, err := store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
		require.NoError(t, err)
		require.NoError(t, rdb.HSet(ctx, jobs.JobKey(cr.ID), "task", long, "status", long).Err())
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: jobs.DeadStream, Values: []any{
			"job_id", long, "task", long, "payload", "{}", "reason", "r", "deliveries", long, "consumer", long, "ts", "1"}}).Err())
		require.NoError(t, store.EnsureGroup(ctx))
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: jobs.QueueStream, Values: []any{
			"job_id", long, "task", long, "payload", "{}"}}).Err())
		require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "w1",
			Streams: []string{jobs.QueueStream, ">"}, Count: 100}).Err())

		for _, path := range []string{"/ui/", "/ui/queue", "/ui/jobs/" + cr.ID} {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			require.Equal(t, http.StatusOK, rec.Code, path)
			assert.Less(t, rec.Body.Len(), 64<<10, "%s: page size", path)
		}
	})
}
