package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// childRun runs the program as a real process (the test binary acting as
// euterpe-central) with c's environment and stdin.
func childRun(t *testing.T, c *cli, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	for k, v := range c.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// `pipeline backfill` refuses a range reaching a day that has not started
// (by the database's clock), as the API does, and enqueues nothing.
func TestPipelineBackfillRefusesFutureDays(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			c := newCLI(t, e)
			tomorrow := time.Now().UTC().AddDate(0, 0, 2).Format("2006-01-02")
			args := []string{"pipeline", "backfill", "--type", "edge_daily", "--symbol", "edge-1", "--from", "2026-01-30", "--to", tomorrow}
			code, out, errOut := childRun(t, c, "", args...)
			if code != 2 || !strings.Contains(errOut, "has not started") || strings.TrimSpace(out) != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 naming the day, nothing enqueued", code, out, errOut)
			}
		})
	}
}

// `pipeline backfill` (a real process) enqueues one job per day of the
// range; run again, every day answers the existing job (created false).
func TestPipelineBackfill(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			c := newCLI(t, e)
			args := []string{"pipeline", "backfill", "--type", "edge_daily", "--symbol", "edge-1", "--from", "2026-01-30", "--to", "2026-02-02"}
			code, out, errOut := childRun(t, c, "", args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, errOut)
			}
			type line struct {
				Asof    string `json:"asof"`
				JobID   string `json:"job_id"`
				Created bool   `json:"created"`
				Status  string `json:"status"`
			}
			parse := func(out string) []line {
				var ls []line
				for _, l := range lines(out) {
					var x line
					if err := json.Unmarshal([]byte(l), &x); err != nil {
						t.Fatalf("%q: %v", l, err)
					}
					ls = append(ls, x)
				}
				return ls
			}
			first := parse(out)
			if len(first) != 4 || first[0].Asof != "2026-01-30" || first[3].Asof != "2026-02-02" || !first[0].Created || first[0].Status != "queued" {
				t.Fatalf("%+v", first)
			}
			_, out, _ = childRun(t, c, "", args...)
			for i, l := range parse(out) {
				if l.Created || l.JobID != first[i].JobID {
					t.Fatalf("rerun %d: %+v", i, l)
				}
			}
			db, _ := c.open()
			var n int
			_ = db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM pipeline_jobs WHERE requested_by = 'backfill'").Scan(&n)
			if n != 4 {
				t.Fatalf("%d jobs", n)
			}
			for _, bad := range [][]string{
				{"pipeline", "backfill", "--type", "nope", "--symbol", "x", "--from", "2026-01-01", "--to", "2026-01-01"},
				{"pipeline", "backfill", "--type", "edge_daily", "--symbol", "x", "--from", "2026-01-02", "--to", "2026-01-01"},
				{"pipeline", "backfill", "--type", "edge_daily", "--symbol", "x", "--from", "2020-01-01", "--to", "2026-01-01"},
			} {
				if code, _, _ := childRun(t, c, "", bad...); code != 2 {
					t.Errorf("%v: exit %d, want 2", bad, code)
				}
			}
		})
	}
}

// `pipeline storage-credentials` reads the secret on stdin (a real
// process), seals it with the keyring and never prints it.
func TestPipelineStorageCredentials(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			c := newCLI(t, e)
			cmd := exec.Command(os.Args[0], "pipeline", "storage-credentials", "--access-key-id", "AKIDEXAMPLE")
			cmd.Env = append(os.Environ(), childEnv+"=1")
			for k, v := range c.env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			cmd.Stdin = strings.NewReader("s3cr3t-value\n")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if strings.Contains(string(out), "s3cr3t-value") || !strings.Contains(string(out), `"access_key_id":"AKIDEXAMPLE"`) {
				t.Fatalf("output:\n%s", out)
			}
			db, keys := c.open()
			ak, sk, err := pipeline.OpenSecret(context.Background(), db, keys, pipeline.StorageSecret)
			if err != nil || ak != "AKIDEXAMPLE" || sk != "s3cr3t-value" {
				t.Fatalf("%s %s %v", ak, sk, err)
			}
			cmd = exec.Command(os.Args[0], "pipeline", "storage-credentials", "--access-key-id", "X")
			cmd.Env = append(os.Environ(), childEnv+"=1", "EUTERPE_DATABASE_URL="+c.env["EUTERPE_DATABASE_URL"], "EUTERPE_KEYRING="+c.env["EUTERPE_KEYRING"])
			cmd.Stdin = strings.NewReader("")
			if err := cmd.Run(); err == nil {
				t.Fatal("empty secret accepted")
			}
		})
	}
}
