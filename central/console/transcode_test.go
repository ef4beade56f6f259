package console_test

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/console"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

var (
	jobLink   = regexp.MustCompile(`href="/ui/transcode/job\?id=([^"]+)"`)
	olderLink = regexp.MustCompile(`id="older-jobs" href="([^"]+)"`)
)

// walk follows the "Older jobs" links from path to the last page and
// returns the job ids shown, in order, and the links followed.
func walk(t *testing.T, cl *client, path string) (ids, links []string) {
	t.Helper()
	for range 50 {
		res, body := cl.get(path)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, res.StatusCode, body)
		}
		table := body[strings.Index(body, `id="jobs"`):]
		for _, m := range jobLink.FindAllStringSubmatch(table, -1) {
			ids = append(ids, m[1])
		}
		m := olderLink.FindStringSubmatch(body)
		if m == nil {
			return ids, links
		}
		path = html.UnescapeString(m[1])
		links = append(links, path)
	}
	t.Fatal("no last page")
	return nil, nil
}

// The transcode job list pages past its page size: "Older jobs" leads
// through every job exactly once, newest first, keeping the status
// filter; a cursor the page did not make is refused 400 invalid_cursor;
// a cursor carried to another status continues from the same point.
func TestJobsPagePages(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		defer console.SetListPageSize(2)()
		c := startCentral(t, e, nil)
		for range 7 {
			c.enqueue(t, "", "")
		}
		fetching := []string{c.advance(t), c.advance(t), c.advance(t)}
		cl := c.client(t)
		cl.signIn(c.op.Token)

		want := func(status string) []string {
			p, err := c.deps.Inbox.List(context.Background(), inbox.Filter{Status: status, Limit: 500})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, j := range p.Jobs {
				ids = append(ids, j.JobID)
			}
			return ids
		}
		all, fetch := want(""), want(schema.StatusFetching)
		if len(all) != 7 || !slices.Equal(sorted(fetch), sorted(fetching)) {
			t.Fatalf("fixture: %v %v", all, fetch)
		}
		got, links := walk(t, cl, "/ui/transcode")
		if !slices.Equal(got, all) {
			t.Errorf("all jobs across pages: %v, want %v", got, all)
		}
		if len(links) != 3 {
			t.Errorf("%d pages after the first, want 3: %v", len(links), links)
		}
		got, links = walk(t, cl, "/ui/transcode?status=fetching")
		if !slices.Equal(got, fetch) {
			t.Errorf("fetching across pages: %v, want %v", got, fetch)
		}
		for _, l := range links {
			if !strings.Contains(l, "status=fetching&") {
				t.Errorf("older link drops the filter: %s", l)
			}
		}

		// A fetching cursor on the queued list: the queued jobs after it.
		cursor := links[0][strings.Index(links[0], "cursor="):]
		got, _ = walk(t, cl, "/ui/transcode?status=queued&"+cursor)
		var queued []string
		for _, id := range all[slices.Index(all, fetch[1])+1:] {
			if !slices.Contains(fetch, id) {
				queued = append(queued, id)
			}
		}
		if !slices.Equal(got, queued) {
			t.Errorf("carried cursor: %v, want %v", got, queued)
		}

		for _, bad := range []string{"nope!", "_w", "%FF", "YQBi", strings.Repeat("QUFB", 40)} {
			res, body := cl.get("/ui/transcode?cursor=" + bad)
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "invalid_cursor") {
				t.Errorf("cursor %q: %d\n%s", bad, res.StatusCode, body)
			}
		}
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

var (
	deadEvent = regexp.MustCompile(`data-event="([^"]+)"`)
	olderDead = regexp.MustCompile(`id="older-dead" href="([^"]+)"`)
)

// The webhook dead letters page pages past its page size: "Older" leads
// through every dead letter exactly once, the latest first; a cursor the
// page did not make is refused 400 invalid_cursor.
func TestDeadPagePages(t *testing.T) {
	engines(t, func(t *testing.T, e sqldb.Engine) {
		defer console.SetListPageSize(1)()
		f := newFixture(t, e)
		cl := f.client(t)
		cl.signIn(f.op.Token)
		rows, err := f.deps.DB.Query(`SELECT event_id FROM job_outbox_events WHERE status = 'dead_letter' ORDER BY dead_lettered_at DESC, event_id DESC`)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		rows.Close()
		if len(want) < 2 {
			t.Fatalf("fixture: %d dead letters", len(want))
		}
		var got []string
		path := "/ui/transcode/dead"
		for range 10 {
			res, body := cl.get(path)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d\n%s", path, res.StatusCode, body)
			}
			for _, m := range deadEvent.FindAllStringSubmatch(body, -1) {
				got = append(got, m[1])
			}
			m := olderDead.FindStringSubmatch(body)
			if m == nil {
				break
			}
			path = html.UnescapeString(m[1])
		}
		if !slices.Equal(got, want) {
			t.Errorf("dead letters across pages: %v, want %v", got, want)
		}
		for _, bad := range []string{"nope!", "MTI", "%FF", "MTo"} {
			res, body := cl.get("/ui/transcode/dead?cursor=" + bad)
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "invalid_cursor") {
				t.Errorf("cursor %q: %d\n%s", bad, res.StatusCode, body)
			}
		}
	})
}
