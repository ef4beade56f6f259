package executor_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestCleanupWaitsForItsDelete: a group's thumbnail cleanup is due a
// delay after the delete was requested, but the delete may wait longer
// behind a long scan or hash. A cleanup run before the delete would leave
// the thumbnails of the copies the delete then removes for ever, so it is
// not claimed while a delete in its group is pending, running or
// retryable, and is once every such delete has ended. A delete in another
// group, or one whose payload is not JSON, holds nothing up. A cleanup
// held by a delete that has failed before is logged, once however often
// it is passed over; one held by a delete yet to fail is not.
func TestCleanupWaitsForItsDelete(t *testing.T) {
	cases := []struct {
		name    string
		status  string // the delete's, set by hand
		lastErr string // the delete's error_message, set by hand
		other   bool   // the delete is in another group
		garbled bool   // its payload is not JSON
		claimed bool
		warned  bool
	}{
		{name: "delete pending", status: store.StatusPending},
		{name: "delete running", status: store.StatusRunning},
		{name: "delete retryable", status: store.StatusRetryable},
		{name: "delete retryable after an error", status: store.StatusRetryable, lastErr: "disk I/O error", warned: true},
		{name: "delete pending again after an error", status: store.StatusPending, lastErr: "disk I/O error", warned: true},
		{name: "delete running again after an error", status: store.StatusRunning, lastErr: "disk I/O error", warned: true},
		{name: "delete failed with an error", status: store.StatusFailed, lastErr: "refused", claimed: true},
		{name: "pending delete of another group after an error", status: store.StatusPending, lastErr: "disk I/O error",
			other: true, claimed: true},
		{name: "delete completed", status: store.StatusCompleted, claimed: true},
		{name: "delete failed", status: store.StatusFailed, claimed: true},
		{name: "delete cancelled", status: store.StatusCancelled, claimed: true},
		{name: "pending delete of another group", status: store.StatusPending, other: true, claimed: true},
		{name: "pending delete with a garbled payload", status: store.StatusPending, garbled: true, claimed: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, false)
			logs := &testsvc.LogBuffer{}
			e.x.Log = slog.New(slog.NewJSONHandler(logs, nil))
			ctx := context.Background()
			_, _, fk, fd := dupPair(t, e)
			j := requestPair(t, e, fk, fd, false) // the cleanup is due at once (no delay)
			payload := j.Payload
			switch {
			case c.other:
				payload = `{"group_key":"blake3:` + strings.Repeat("e", 64) + `"}`
			case c.garbled:
				payload = `{"group_key":`
			}
			var lastErr any
			if c.lastErr != "" {
				lastErr = c.lastErr
			}
			if _, err := e.st.DB.Exec(`UPDATE jobs SET status = ?, payload = ?, worker_id = 'w', lease_expires_at = ?, error_message = ?
WHERE id = ?`, c.status, payload, e.st.NowMS()+60_000, lastErr, j.ID); err != nil {
				t.Fatal(err)
			}
			rounds := 1
			if !c.claimed {
				rounds = 3 // passed over again and again
			}
			for range rounds {
				did, err := e.x.RunCleanupOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if did != c.claimed {
					t.Fatalf("cleanup claimed = %v with the delete %s, want %v", did, c.status, c.claimed)
				}
			}
			want := 0
			if c.warned {
				want = 1
			}
			if n := strings.Count(logs.String(), heldWarning); n != want {
				t.Fatalf("%d held-cleanup warnings, want %d:\n%s", n, want, logs.String())
			}
		})
	}
}

// TestCleanupAfterDeleteQueuedBehindScan follows a delete requested while
// a scan is queued: the cleanup waits for the scan and the delete, then
// removes the deleted copy's thumbnail.
func TestCleanupAfterDeleteQueuedBehindScan(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	src := filepath.Join(e.outside, "dup.jpg")
	writeJPEG(t, src, 40, 30)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	kept, del := e.write("k/a.jpg", string(data)), e.write("d/a.jpg", string(data))
	e.scanAndHash()
	fk, fd := e.file(kept), e.file(del)
	e.admit(del, store.FormatJPEG, 16)
	if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
		t.Fatalf("render: did=%v err=%v", did, err)
	}
	th := e.admit(del, store.FormatJPEG, 16)
	if th.Status != store.StatusReady {
		t.Fatalf("thumbnail %s", th.Status)
	}

	if _, err := e.p.EnqueueScan(ctx); err != nil { // the long scan
		t.Fatal(err)
	}
	requestPair(t, e, fk, fd, false)
	if did, err := e.x.RunCleanupOnce(ctx); did || err != nil {
		t.Fatalf("cleanup ran before the delete: did=%v err=%v", did, err)
	}
	if j := e.runJob(); j.Kind != store.KindScan || j.Status != store.StatusCompleted {
		t.Fatalf("first job %s %s", j.Kind, j.Status)
	}
	if did, err := e.x.RunCleanupOnce(ctx); did || err != nil {
		t.Fatalf("cleanup ran before the delete: did=%v err=%v", did, err)
	}
	if j := e.runJob(); j.Kind != store.KindDelete || j.Status != store.StatusCompleted {
		t.Fatalf("second job %s %s: %s", j.Kind, j.Status, deref(j.ErrorMessage))
	}
	if did, err := e.x.RunCleanupOnce(ctx); !did || err != nil {
		t.Fatalf("cleanup after the delete: did=%v err=%v", did, err)
	}
	var rows int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE id = ?`, th.ID).Scan(&rows)
	if _, err := os.Stat(th.OutputPath); rows != 0 || !os.IsNotExist(err) {
		t.Fatalf("deleted copy's thumbnail kept: row %d, file %v", rows, err)
	}
}
