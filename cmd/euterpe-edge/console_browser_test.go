package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/console/browsertest"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// submitFromPage fills the jobs page's form and waits for the job page it
// leads to; it returns the job id.
func submitFromPage(t *testing.T, b *browsertest.Browser, base, task, payload string) string {
	t.Helper()
	b.Open(base + "/ui/")
	b.Run(
		chromedp.SetValue("#task", task, chromedp.ByQuery),
		chromedp.SetValue("#payload", payload, chromedp.ByQuery),
		chromedp.Click("#submit", chromedp.ByQuery),
	)
	b.WaitFor("the job page", `location.pathname.indexOf("/ui/jobs/") === 0 && document.querySelector("#job")`, 30*time.Second)
	var id string
	b.Eval(`document.querySelector("#job").getAttribute("data-job-id")`, &id)
	require.Len(t, id, 36)
	return id
}

// eventIDs are the stream entry ids the job page shows, in order.
func eventIDs(b *browsertest.Browser) []string {
	var ids []string
	b.Eval(`Array.from(document.querySelectorAll("#events tbody tr")).map(function (r) { return r.getAttribute("data-entry"); })`, &ids)
	return ids
}

// TestConsoleInBrowser drives every page of the edge console in headless
// Chromium against a real serve stack: a job submitted from the page shows
// its events live (and without a gap after a cut connection), a running
// job is cancelled from its page, markup in a payload and a file name is
// shown as text, and a duplicate deleted from the library page lands in
// the trash. Screenshots of each page go to .run/screenshots/.
func TestConsoleInBrowser(t *testing.T) {
	b := browsertest.New(t)
	s := startConsoleStack(t, nil)
	ctx := context.Background()

	t.Run("payload with markup is text", func(t *testing.T) {
		id := submitFromPage(t, b, s.base, "tool", `{"x": "`+strings.ReplaceAll(hostile, `"`, `\"`)+`"}`)
		b.WaitText("#stream-state", "ended", 30*time.Second)
		b.WaitText("#result", hostile, 10*time.Second) // the exec backend echoes the payload
		assert.Contains(t, b.Text("#payload"), hostile)
		var injected int
		b.Eval(`document.querySelectorAll("main script, main img[src=x]").length`, &injected)
		assert.Zero(t, injected)
		assert.Equal(t, "done", b.Text("#status"))
		b.Screenshot("edge-job")
		b.Open(s.base + "/ui/")
		b.WaitText("#jobs", id, 5*time.Second)
	})

	t.Run("events arrive live and resume without a gap", func(t *testing.T) {
		id := submitFromPage(t, b, s.base, "chat", `{"prompt": "hello"}`)
		b.WaitText("#stream-state", "live", 30*time.Second)
		s.llm.release <- 3
		// Deltas are coalesced by time, so a loaded machine may merge
		// tokens: wait for the text, not for a number of events.
		b.WaitText("#stream-text", "tok3", 30*time.Second)
		assert.Equal(t, "running", b.Text("#status"), "the deltas arrived before the job ended")
		// Cut the connection while more events are written; the page
		// resumes after the last entry it showed.
		b.Eval(`window.jobStream.drop()`, nil)
		s.llm.release <- 4
		b.WaitText("#stream-text", "tok7", 30*time.Second)
		s.llm.release <- finish
		b.WaitText("#stream-state", "ended", 30*time.Second)
		assert.Equal(t, "done", b.Text("#status"))
		b.WaitText("#result", "tok7", 10*time.Second)
		b.Screenshot("edge-job-live")

		shown := eventIDs(b)
		stored, err := s.rdb.XRange(ctx, jobs.EventsKey(id), "-", "+").Result()
		require.NoError(t, err)
		var want []string
		for _, m := range stored {
			want = append(want, m.ID)
		}
		assert.Equal(t, want, shown, "every stored event once, in order")
	})

	t.Run("cancel from the job page", func(t *testing.T) {
		id := submitFromPage(t, b, s.base, "chat", `{"prompt": "a long one"}`)
		b.WaitText("#status", "running", 30*time.Second)
		b.Run(chromedp.Click("#cancel", chromedp.ByQuery))
		b.WaitText("#status", "canceled", 30*time.Second)
		b.WaitText("#stream-state", "ended", 30*time.Second)
		j, err := jobs.NewStore(s.rdb).Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, jobs.Canceled, j.Status)
		b.Screenshot("edge-job-canceled")
	})

	t.Run("jobs list and filter", func(t *testing.T) {
		b.Open(s.base + "/ui/?status=canceled")
		assert.Contains(t, b.Text(".filters a.active"), "canceled (1)")
		assert.Equal(t, 1, countRows(b, "#jobs tbody tr"))
		b.Open(s.base + "/ui/")
		b.WaitFor("the charts", `document.querySelectorAll(".chart svg").length === 3`, 20*time.Second)
		b.Screenshot("edge-jobs")
		b.Viewport(390, 844)
		b.Open(s.base + "/ui/")
		b.Screenshot("edge-jobs-phone")
		b.Viewport(1280, 900)
	})

	t.Run("queue health", func(t *testing.T) {
		_, err := s.rdb.XAdd(ctx, deadLetter(hostile)).Result()
		require.NoError(t, err)
		b.Open(s.base + "/ui/queue")
		assert.Contains(t, b.Text("#dead"), `{"x":"`+hostile+`"}`)
		assert.Equal(t, "1", b.Text("#dead-count"))
		ready := b.Text("#ready")
		assert.Contains(t, ready, "redis")
		assert.Contains(t, ready, "library")
		assert.NotContains(t, ready, "not ready")
		assert.NotEmpty(t, strings.TrimSpace(b.Text("#workers td.mono")))
		b.Screenshot("edge-queue")
	})

	t.Run("delete a duplicate into the trash", func(t *testing.T) {
		s.waitGroups(t)
		b.Open(s.base + "/ui/library")
		b.WaitFor("the thumbnails", `Array.from(document.querySelectorAll(".group img")).every(function (i) { return i.complete && i.naturalWidth > 0; })`, 60*time.Second)
		var paths []string
		b.Eval(`Array.from(document.querySelectorAll(".group .file .path")).map(function (n) { return n.textContent; })`, &paths)
		hostileName := filepath.Join(s.lib, "<script>alert(1)<script>.png")
		require.Contains(t, paths, hostileName, "the file name is shown as text")
		b.Screenshot("edge-library")
		// Delete the copy with the markup name; the other two remain.
		b.Eval(`(function () {
		  var f = Array.from(document.querySelectorAll(".group .file")).find(function (f) { return f.getAttribute("data-path").indexOf("<script>") >= 0; });
		  f.querySelector(".delete-box").click();
		  return true;
		})()`, nil)
		remains := b.Text(".group .remains")
		assert.Contains(t, remains, "Will remain")
		assert.Contains(t, remains, filepath.Join(s.lib, "photo.png"))
		assert.NotContains(t, remains, "<script>")
		b.Run(chromedp.Click(".group .delete-btn", chromedp.ByQuery))
		b.WaitFor("the delete job", `document.querySelector(".group[data-delete-status]")`, 60*time.Second)
		var status string
		b.Eval(`document.querySelector(".group").getAttribute("data-delete-status")`, &status)
		require.Equal(t, "completed", status, b.Text(".group .delete-result"))
		assert.Contains(t, b.Text(".group .delete-result"), "moved to the trash")
		b.Screenshot("edge-library-deleted")
		_, err := os.Stat(hostileName)
		assert.True(t, os.IsNotExist(err), "the deleted copy left the library")
		assert.True(t, slices.Contains(trashed(t, s.state), "<script>alert(1)<script>.png"), "in the trash: %v", trashed(t, s.state))
		for _, kept := range []string{filepath.Join(s.lib, "photo.png"), filepath.Join(s.lib, "backup", "photo.png")} {
			_, err := os.Stat(kept)
			assert.NoError(t, err, "kept copy %s", kept)
		}
	})

	t.Run("a stream the gateway cannot read ends", func(t *testing.T) {
		id := submitFromPage(t, b, s.base, "chat", `{"prompt": "unreadable"}`)
		b.WaitText("#stream-state", "live", 30*time.Second)
		key := jobs.EventsKey(id)
		require.NoError(t, s.rdb.Del(ctx, key).Err())
		require.NoError(t, s.rdb.Set(ctx, key, "not a stream", 0).Err())
		// The page reconnects and meets stream_error: it stops there
		// instead of reconnecting for ever.
		b.Eval(`window.jobStream.drop()`, nil)
		b.WaitText("#stream-state", "unreadable", 30*time.Second)
		var types []string
		b.Eval(`Array.from(document.querySelectorAll("#events tbody tr")).map(function (r) { return r.getAttribute("data-type"); })`, &types)
		assert.Equal(t, 1, countOf(types, "stream_error"), "one stream_error row: %v", types)
		select {
		case s.llm.release <- finish:
		case <-time.After(10 * time.Second):
		}
	})

	// Nothing the pages did raised a script error or broke the CSP.
	for _, e := range b.Errors() {
		t.Errorf("page error: %s", e)
	}
}

func countRows(b *browsertest.Browser, sel string) int {
	var n int
	b.Eval(`document.querySelectorAll("`+sel+`").length`, &n)
	return n
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
