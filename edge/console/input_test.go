package console_test

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// message is the text of a refusal page.
var message = regexp.MustCompile(`(?s)<p class="error-msg" id="message">(.*?)</p>`)

// Query parameters and job ids come from whoever follows a link: the
// pages answer 400 or 404 to malformed ones, never a server error, and
// echo them escaped, as valid UTF-8 and capped, the message around them
// included.
func TestConsoleBadInput(t *testing.T) {
	rdb, _ := testsvc.Redis(t)
	e := mounted(t, jobs.NewStore(rdb))
	long := strings.Repeat("x", 100_000)

	tests := []struct {
		name   string
		target string
		status int
	}{
		{"unknown status", "/ui/?status=%3Cscript%3Ealert(1)%3C/script%3E", http.StatusBadRequest},
		{"status not UTF-8", "/ui/?status=%ff%fe", http.StatusBadRequest},
		{"status with NUL", "/ui/?status=a%00b", http.StatusBadRequest},
		{"long status", "/ui/?status=" + long, http.StatusBadRequest},
		{"status given twice", "/ui/?status=queued&status=%3Cb%3E", http.StatusOK},
		{"job id markup", "/ui/jobs/%3Cscript%3Ealert(1)%3C%2Fscript%3E", http.StatusNotFound},
		{"job id not UTF-8", "/ui/jobs/%ff%fe", http.StatusNotFound},
		{"job id long", "/ui/jobs/" + long, http.StatusNotFound},
		{"job id braces", "/ui/jobs/{0f8fad5b-d9cb-469f-a165-70867728950e}", http.StatusNotFound},
		{"job id urn", "/ui/jobs/urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e", http.StatusNotFound},
		{"job id upper case", "/ui/jobs/0F8FAD5B-D9CB-469F-A165-70867728950E", http.StatusNotFound},
		{"job id unknown", "/ui/jobs/0f8fad5b-d9cb-469f-a165-70867728950e", http.StatusNotFound},
		{"queue with query", "/ui/queue?x=%ff", http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.target, nil))
			assert.Equal(t, tc.status, rec.Code)
			body := rec.Body.String()
			assert.True(t, utf8.ValidString(body), "body is not UTF-8")
			assert.NotContains(t, body, "<script>alert")
			assert.NotContains(t, body, "\x00")
			assert.NotContains(t, body, strings.Repeat("x", daemon.MaxMessage+1))
			if m := message.FindStringSubmatch(body); m != nil {
				assert.LessOrEqual(t, len(html.UnescapeString(m[1])), daemon.MaxMessage, "message longer than the cap")
			}
		})
	}
}

// Links to a job from the dead letters and the worker list carry the job
// id as a path segment: an id from a worker of another implementation
// that holds a slash, '?' or '#' cannot lead elsewhere.
func TestConsoleJobLinksEscapeTheID(t *testing.T) {
	rdb, _ := testsvc.Redis(t)
	e := mounted(t, jobs.NewStore(rdb))
	require.NoError(t, rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: jobs.DeadStream, Values: []any{
		"job_id", "../../v1/jobs/x/cancel?a=1#b", "task", "chat", "payload", "{}", "reason", "r", "deliveries", "9", "consumer", "w", "ts", "1"}}).Err())
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/queue", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), `href="/ui/jobs/..%2F..%2Fv1%2Fjobs%2Fx%2Fcancel%3Fa=1%23b"`)
}
