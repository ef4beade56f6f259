package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/console"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A console page whose session lookup fails: a database that cannot be
// reached is 503 with Retry-After; a lookup that fails for any other reason
// (here the sessions table is gone) is a 500 whose cause reaches the log,
// not a 503 that says "retry" and hides it.
func TestSessionLookupFailures(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		c := startCentral(t, e, map[string]string{"EUTERPE_CENTRAL_ROLES": "api,console"})
		get := func() *http.Response {
			r, _ := http.NewRequest(http.MethodGet, c.base+"/ui/transcode", nil)
			r.AddCookie(&http.Cookie{Name: console.SessionCookie, Value: "some-session-id"})
			res, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res
		}
		ctx := context.Background()
		if _, err := c.deps.DB.ExecContext(ctx, `ALTER TABLE operator_sessions RENAME TO operator_sessions_gone`); err != nil {
			t.Fatal(err)
		}
		if res := get(); res.StatusCode != http.StatusInternalServerError {
			t.Fatalf("sessions table gone: %d", res.StatusCode)
		}
		if !strings.Contains(c.logs.String(), "console session") {
			t.Errorf("the cause is not logged:\n%s", c.logs.String())
		}
		if _, err := c.deps.DB.ExecContext(ctx, `ALTER TABLE operator_sessions_gone RENAME TO operator_sessions`); err != nil {
			t.Fatal(err)
		}
		_ = c.deps.DB.Close()
		if res := get(); res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "5" {
			t.Fatalf("database closed: %d Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
		}
	})
}
