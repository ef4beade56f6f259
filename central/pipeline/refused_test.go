package pipeline

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// getRefused is GET /v1/pipeline/schedule/refused with query q.
func getRefused(t *testing.T, base, q string) (int, string, RefusedPage) {
	t.Helper()
	resp, err := http.Get(base + "/v1/pipeline/schedule/refused?" + q)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
		RefusedPage
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body.Error.Code, body.RefusedPage
}

// The days the scheduler refused for good are listed by the API (latest
// day first, a keyset page at a time, filtered by type and symbol) with
// the refusal's code and message, and each names the key's active job once
// one was submitted (a backfill): an operator finds which days wait without
// reading logs. Days that were scheduled are not listed.
func TestAPIListsRefusedScheduledDays(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock(time.Date(2026, 3, 10, 3, 0, 0, 0, time.UTC))
		f := newFixture(t, db, clk.Now)
		f.store.Metrics = NewMetrics(nil, nil)
		refuse := true
		require.NoError(t, f.types.Register(JobType{Name: "edge_like", Runner: Pipeline{stage("storage", "x", nil, nil)},
			Validate: func(m JobMessage) error {
				if refuse && strings.ContainsRune(m.Symbol, ' ') {
					return errors.New("symbol must be an edge id; password=hunter2")
				}
				return nil
			}}))
		s := &Scheduler{Store: f.store, At: 2 * time.Hour, Now: clk.Now, CatchupDays: 3, Log: f.store.Log, Entries: []ScheduleEntry{
			{JobType: "edge_like", Symbols: FixedSymbols([]string{"edge a", "edge-b"})},
			{JobType: "noop", Symbols: FixedSymbols([]string{"bad sym "})},
		}}
		n, err := s.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, n, "edge-b's three days")
		base := apiServer(t, f)

		status, _, p := getRefused(t, base, "")
		require.Equal(t, http.StatusOK, status)
		type day struct{ asof, jobType, symbol, code string }
		var got []day
		for _, d := range p.Days {
			got = append(got, day{d.Asof, d.JobType, d.Symbol, d.ErrorCode})
			require.NotContains(t, d.ErrorMessage, "hunter2")
			require.LessOrEqual(t, len(d.ErrorMessage), 512)
			require.Empty(t, d.ActiveJobID)
			require.False(t, d.RefusedAt.IsZero())
		}
		require.Equal(t, []day{
			{"2026-03-09", "noop", "bad sym ", CodeInvalidMessage},
			{"2026-03-09", "edge_like", "edge a", CodeInvalidMessage},
			{"2026-03-08", "noop", "bad sym ", CodeInvalidMessage},
			{"2026-03-08", "edge_like", "edge a", CodeInvalidMessage},
			{"2026-03-07", "noop", "bad sym ", CodeInvalidMessage},
			{"2026-03-07", "edge_like", "edge a", CodeInvalidMessage},
		}, got)
		require.Contains(t, p.Days[1].ErrorMessage, "edge id")
		require.Empty(t, p.NextCursor)

		// Pages of two, in the same order.
		var paged []day
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 4)
			status, code, p := getRefused(t, base, "limit=2&cursor="+url.QueryEscape(cursor))
			require.Equal(t, http.StatusOK, status, code)
			for _, d := range p.Days {
				paged = append(paged, day{d.Asof, d.JobType, d.Symbol, d.ErrorCode})
			}
			if cursor = p.NextCursor; cursor == "" {
				break
			}
		}
		require.Equal(t, got, paged)

		status, _, p = getRefused(t, base, "job_type=edge_like&symbol="+url.QueryEscape("edge a"))
		require.Equal(t, http.StatusOK, status)
		require.Len(t, p.Days, 3)

		// The cause is fixed and one day submitted by hand: it names its job.
		refuse = false
		c := f.submit(t, "edge_like", "edge a", "2026-03-08")
		_, _, p = getRefused(t, base, "job_type=edge_like")
		require.Len(t, p.Days, 3)
		for _, d := range p.Days {
			want := ""
			if d.Asof == "2026-03-08" {
				want = c.JobID
			}
			require.Equal(t, want, d.ActiveJobID, d.Asof)
		}

		for _, q := range []string{
			"limit=0", "limit=501", "limit=x", "symbol=%FF", "job_type=A%00B",
			"cursor=" + base64.RawURLEncoding.EncodeToString([]byte{0xff}),
			"cursor=" + base64.RawURLEncoding.EncodeToString([]byte(`["2026-03-09","noop"]`)),
			"cursor=" + base64.RawURLEncoding.EncodeToString([]byte(`["yesterday","noop","x"]`)),
		} {
			status, code, _ := getRefused(t, base, q)
			require.Equal(t, http.StatusBadRequest, status, q)
			require.Equal(t, "invalid_request", code, q)
		}
		_, err = f.store.Refused(ctx, RefusedFilter{Cursor: "%%%"})
		require.ErrorIs(t, err, ErrBadCursor)
	})
}
