package executor_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// heldWarning is how the log starts to say a failing delete holds its
// group's thumbnail cleanup back.
const heldWarning = "thumbnail cleanup of a duplicate group waits for a failed delete"

// TestCleanupHeldByFailingDeleteIsLogged: a delete that fails again and
// again, retryable each time, holds its group's thumbnail cleanup back (the
// copy it would delete, and its thumbnail, are still there). The log says
// so once, naming the group, the file and the delete's last error, however
// often the cleanup is passed over, and again only once the warning period
// has passed. Once the delete ends, the cleanup runs.
func TestCleanupHeldByFailingDeleteIsLogged(t *testing.T) {
	e := newEnv(t, false) // the policy's retry pass writes too
	logs := &testsvc.LogBuffer{}
	e.x.Log = slog.New(slog.NewJSONHandler(logs, nil))
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

	// Refused before the delete touches a file: each run ends retryable.
	mustExecT(t, e, `CREATE TRIGGER refuse_keep BEFORE INSERT ON delete_decisions
		WHEN NEW.decision = 'keep' BEGIN SELECT RAISE(ABORT, 'decision not recorded'); END`)
	j := requestPair(t, e, fk, fd, false) // its cleanup is due at once
	group := groupOf(t, fk).String()
	for run := range 2 {
		if run > 0 {
			if got := requeue(t, e, j.ID); got.Status != store.StatusPending {
				t.Fatalf("not requeued: %s", got.Status)
			}
		}
		if got := e.runJob(); got.ID != j.ID || got.Status != store.StatusRetryable {
			t.Fatalf("run %d: job %d %s", run, got.ID, got.Status)
		}
		for range 3 {
			if did, err := e.x.RunCleanupOnce(ctx); did || err != nil {
				t.Fatalf("cleanup ran while its delete keeps failing: did=%v err=%v", did, err)
			}
		}
	}
	out := logs.String()
	if n := strings.Count(out, heldWarning); n != 1 {
		t.Fatalf("%d held-cleanup warnings, want 1:\n%s", n, out)
	}
	for _, want := range []string{group, del, "decision not recorded"} {
		if !strings.Contains(out, want) {
			t.Errorf("the warning does not name %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(del); err != nil {
		t.Fatalf("the copy to delete: %v", err)
	}
	var rows int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE id = ?`, th.ID).Scan(&rows)
	if _, err := os.Stat(th.OutputPath); rows != 1 || err != nil {
		t.Fatalf("thumbnail of a copy still there removed: row %d, file %v", rows, err)
	}

	executor.SetHeldCleanupWarn(e.x, time.Nanosecond) // the period has passed
	if did, err := e.x.RunCleanupOnce(ctx); did || err != nil {
		t.Fatalf("cleanup ran while its delete keeps failing: did=%v err=%v", did, err)
	}
	if n := strings.Count(logs.String(), heldWarning); n != 2 {
		t.Fatalf("%d held-cleanup warnings after the period, want 2", n)
	}

	mustExecT(t, e, `DROP TRIGGER refuse_keep`)
	if got := requeue(t, e, j.ID); got.Status != store.StatusPending {
		t.Fatalf("not requeued: %s", got.Status)
	}
	if got := e.runJob(); got.ID != j.ID || got.Status != store.StatusCompleted {
		t.Fatalf("last run: job %d %s: %s", got.ID, got.Status, deref(got.ErrorMessage))
	}
	if did, err := e.x.RunCleanupOnce(ctx); !did || err != nil {
		t.Fatalf("cleanup after the delete: did=%v err=%v", did, err)
	}
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE id = ?`, th.ID).Scan(&rows)
	if _, err := os.Stat(th.OutputPath); rows != 0 || !os.IsNotExist(err) {
		t.Fatalf("deleted copy's thumbnail kept: row %d, file %v", rows, err)
	}
}
