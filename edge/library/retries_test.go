package library_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestJobRetriesSetting: EUTERPE_LIBRARY_JOB_RETRIES is the number of
// retries of a recovered scan before it fails. Unset it is 5; 0 fails the
// scan at its first recovery, instead of retrying it for ever.
func TestJobRetriesSetting(t *testing.T) {
	cases := []struct {
		name, env   string
		wantRetries int
		wantStatus  string // of a scan whose lease expired, after one policy tick
	}{
		{"unset: the default", "", 5, store.StatusRetryable},
		{"0: failed at the first recovery", "0", 0, store.StatusFailed},
		{"2: retried", "2", 2, store.StatusRetryable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s library.Settings
			cfg := daemon.NewConfig("test", func(k string) string {
				if k == "EUTERPE_LIBRARY_JOB_RETRIES" {
					return c.env
				}
				return ""
			})
			s.Register(cfg)
			if err := cfg.Parse(nil); err != nil {
				t.Fatal(err)
			}
			if s.MaxJobRetries != c.wantRetries {
				t.Fatalf("MaxJobRetries = %d, want %d", s.MaxJobRetries, c.wantRetries)
			}
			base := t.TempDir()
			mkdir(t, filepath.Join(base, "lib"))
			s.Roots = filepath.Join(base, "lib")
			s.Watch = false
			ctx := context.Background()
			lib, err := library.New(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), filepath.Join(base, "state"), "w", s)
			if err != nil {
				t.Fatal(err)
			}
			defer lib.Store.Close()
			j, err := lib.Policy.EnqueueScan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Its worker died: the lease ran out while it was running.
			if _, err := lib.Store.DB.Exec(`UPDATE jobs SET status = 'running', worker_id = 'gone', lease_expires_at = ? WHERE id = ?`,
				lib.Store.NowMS()-1, j.ID); err != nil {
				t.Fatal(err)
			}
			if err := lib.Scheduler.Tick(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := lib.Store.GetJob(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != c.wantStatus {
				t.Fatalf("recovered scan is %s, want %s", got.Status, c.wantStatus)
			}
		})
	}
}
