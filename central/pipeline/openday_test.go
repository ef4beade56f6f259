package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A submit of a day that has not started — a future day, by the
// database's clock whatever the pod's — is refused (400 INVALID_MESSAGE)
// and stores nothing: run now, it would report nothing and, once
// succeeded, hold the key, so the day's real run — the scheduler's after
// its slot — would be answered with that empty report. Today is accepted.
func TestSubmitRefusesADayThatHasNotStarted(t *testing.T) {
	for _, skew := range []time.Duration{0, -50 * time.Hour, 50 * time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				ctx := context.Background()
				pod := newClock(time.Now().Add(skew))
				f := newFixture(t, db, pod.Now)
				base := apiServer(t, f)
				dbNow, err := db.Clock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				day := func(d int) string { return dbNow.UTC().AddDate(0, 0, d).Format(DateLayout) }
				cases := []struct {
					asof   string
					status int
					code   string
				}{
					{day(-1), http.StatusAccepted, ""},
					{"2026-01-02", http.StatusAccepted, ""},
					{day(0), http.StatusAccepted, ""},
					{day(1), http.StatusBadRequest, CodeInvalidMessage},
					{"9999-12-31", http.StatusBadRequest, CodeInvalidMessage},
				}
				for _, tc := range cases {
					b, _ := json.Marshal(SubmitRequest{JobType: "noop", Symbol: "AAPL", Asof: tc.asof})
					resp, err := http.Post(base+"/v1/pipeline/jobs", "application/json", bytes.NewReader(b))
					if err != nil {
						t.Fatal(err)
					}
					var body struct {
						Error struct{ Code, Message string } `json:"error"`
					}
					_ = json.NewDecoder(resp.Body).Decode(&body)
					resp.Body.Close()
					if resp.StatusCode != tc.status || body.Error.Code != tc.code {
						t.Errorf("asof %s: %d %s, want %d %s", tc.asof, resp.StatusCode, body.Error.Code, tc.status, tc.code)
					}
					if tc.code != "" && !strings.Contains(body.Error.Message, "has not started") {
						t.Errorf("asof %s: message %q", tc.asof, body.Error.Message)
					}
					var n int
					if err := db.QueryRowContext(ctx, db.Rebind("SELECT COUNT(*) FROM pipeline_jobs WHERE asof = ?"), tc.asof).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if want := map[bool]int{true: 1, false: 0}[tc.code == ""]; n != want {
						t.Errorf("asof %s: %d jobs stored", tc.asof, n)
					}
				}
			})
		})
	}
}
