package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

var (
	centralOnce sync.Once
	centralBin  string
	centralErr  error
)

// TestMain removes the euterpe-central build once every test is done: a
// binary of tens of MB left in the temp directory by each run adds up.
func TestMain(m *testing.M) {
	code := m.Run()
	if centralBin != "" && centralErr == nil {
		_ = os.RemoveAll(filepath.Dir(centralBin))
	}
	os.Exit(code)
}

// centralBinary builds euterpe-central once per test run.
func centralBinary(t *testing.T) string {
	centralOnce.Do(func() {
		dir, err := os.MkdirTemp("", "euterpectl-central-")
		if err != nil {
			centralErr = err
			return
		}
		centralBin = filepath.Join(dir, "euterpe-central")
		out, err := exec.Command("go", "build", "-o", centralBin, "github.com/vesta-cx/euterpe/cmd/euterpe-central").CombinedOutput()
		if err != nil {
			centralErr = err
			centralBin = string(out)
		}
	})
	if centralErr != nil {
		t.Fatalf("build euterpe-central: %v\n%s", centralErr, centralBin)
	}
	return centralBin
}

// startCentralProcess runs a real euterpe-central process and returns its URL
// and an operator token.
func startCentralProcess(t *testing.T, env []string) (string, string) {
	bin := centralBinary(t)
	cmd := exec.Command(bin, "operator", "create", "--name", "ctl-test")
	cmd.Env = env
	out, err := cmd.Output()
	require.NoError(t, err)
	var created struct{ Token string }
	require.NoError(t, json.Unmarshal(out, &created))

	cmd = exec.Command(bin, "serve")
	cmd.Env = append(env, "EUTERPE_CENTRAL_ADDR=127.0.0.1:0", "EUTERPE_CENTRAL_ROLES=api,sweeper,pipeline")
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	require.NoError(t, cmd.Start())
	addr := make(chan string, 1)
	var logs bytes.Buffer
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := listeningRe.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = pw.Close()
		if t.Failed() {
			mu.Lock()
			t.Logf("euterpe-central logs:\n%s", logs.String())
			mu.Unlock()
		}
	})
	select {
	case a := <-addr:
		return "http://" + a, created.Token
	case <-time.After(60 * time.Second):
		t.Fatal("euterpe-central did not start")
	}
	return "", ""
}

func ctl(env map[string]string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}, args)
	return code, out.String(), errb.String()
}

// euterpectl pipeline … against a real euterpe-central process, on both
// engines.
func TestPipelineCommands(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			flaky := filepath.Join(t.TempDir(), "flaky.sh")
			require.NoError(t, os.WriteFile(flaky, []byte("#!/bin/sh\nexit 1\n"), 0o755))
			slow := filepath.Join(t.TempDir(), "slow.sh")
			require.NoError(t, os.WriteFile(slow, []byte("#!/bin/sh\nsleep 1\necho '{\"result_ref\":\"mem://done\"}'\n"), 0o755))
			env := append(os.Environ(), "EUTERPE_DATABASE_URL="+sqltest.URL(t, e), "EUTERPE_KEYRING=k1:"+credentials.NewKey(),
				"EUTERPE_STATE_DIR="+t.TempDir(), "EUTERPE_PIPELINE_TYPES=flaky=exec:"+flaky+",slow=exec:"+slow,
				"EUTERPE_PIPELINE_BACKOFF_BASE=1ms", "EUTERPE_PIPELINE_BACKOFF_MAX=1ms", "EUTERPE_PIPELINE_POLL=20ms", "EUTERPE_LOG_LEVEL=info")
			url, token := startCentralProcess(t, env)
			cenv := map[string]string{"EUTERPE_CENTRAL_URL": url, "EUTERPE_OPERATOR_TOKEN": token}

			// The composed process: /ready has §6's keys next to its own,
			// /openapi.json the pipeline routes.
			for path, want := range map[string][]string{
				"/ready":        {`"queue":"ok"`, `"repo":"ok"`, `"database":"ok"`, `"timestamp":`, `"status":"ready"`},
				"/openapi.json": {`"/v1/pipeline/jobs"`, `"/v1/pipeline/dlq"`, `"PipelineJob"`, `"/transcode"`},
			} {
				resp, err := http.Get(url + path)
				require.NoError(t, err)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.Equal(t, 200, resp.StatusCode, path)
				compact := strings.ReplaceAll(strings.ReplaceAll(string(b), " ", ""), "\n", "")
				for _, w := range want {
					require.Contains(t, compact, w, path)
				}
			}

			var first, sl struct {
				JobID   string `json:"job_id"`
				Created bool   `json:"created"`
				Status  string `json:"status"`
			}
			// The same key while queued, running or succeeded: the same job.
			code, out, errOut := ctl(cenv, "pipeline", "enqueue", "--type", "slow", "--symbol", "S", "--asof", "2026-01-02")
			require.Equal(t, 0, code, errOut)
			require.NoError(t, json.Unmarshal([]byte(out), &sl))
			require.True(t, sl.Created)
			_, out, _ = ctl(cenv, "pipeline", "enqueue", "--type", "slow", "--symbol", "S", "--asof", "2026-01-02")
			require.Contains(t, out, `"created":false`)
			require.Contains(t, out, sl.JobID)
			require.Eventually(t, func() bool {
				_, out, _ := ctl(cenv, "pipeline", "get", sl.JobID)
				return strings.Contains(out, `"status":"succeeded"`) && strings.Contains(out, `"result_ref":"mem://done"`)
			}, 30*time.Second, 50*time.Millisecond)
			_, out, _ = ctl(cenv, "pipeline", "enqueue", "--type", "slow", "--symbol", "S", "--asof", "2026-01-02")
			require.Contains(t, out, `"created":false`)

			code, out, errOut = ctl(cenv, "pipeline", "enqueue", "--type", "edge_daily", "--symbol", "edge-1", "--asof", "2026-01-02")
			require.Equal(t, 0, code, errOut)
			require.NoError(t, json.Unmarshal([]byte(out), &first))
			require.True(t, first.Created)

			// No events synced for edge-1: the worker fails it UPSTREAM_EMPTY.
			require.Eventually(t, func() bool {
				_, out, _ := ctl(cenv, "pipeline", "get", first.JobID)
				return strings.Contains(out, `"status":"failed"`) && strings.Contains(out, `"error_code":"UPSTREAM_EMPTY"`)
			}, 30*time.Second, 50*time.Millisecond)

			code, out, _ = ctl(cenv, "pipeline", "enqueue", "--type", "flaky", "--symbol", "X", "--asof", "2026-01-02")
			require.Equal(t, 0, code)
			var fl struct {
				JobID string `json:"job_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &fl))
			require.Eventually(t, func() bool {
				_, out, _ := ctl(cenv, "pipeline", "dlq")
				return strings.Contains(out, fl.JobID)
			}, 30*time.Second, 50*time.Millisecond)
			code, out, _ = ctl(cenv, "pipeline", "list", "--status", "failed", "--type", "edge_daily")
			require.Equal(t, 0, code)
			require.Equal(t, 1, strings.Count(out, "\n"))
			code, out, errOut = ctl(cenv, "pipeline", "redrive", fl.JobID)
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, `"status":"queued"`)
			code, _, errOut = ctl(cenv, "pipeline", "redrive", first.JobID)
			require.Equal(t, 1, code)
			require.Contains(t, errOut, "invalid_transition")

			// Paging with a small limit, and --all.
			for _, d := range []string{"2026-01-03", "2026-01-04", "2026-01-05"} {
				ctl(cenv, "pipeline", "enqueue", "--type", "edge_daily", "--symbol", "edge-2", "--asof", d)
			}
			_, out, errOut = ctl(cenv, "pipeline", "list", "--symbol", "edge-2", "--limit", "2")
			require.Equal(t, 2, strings.Count(out, "\n"))
			require.Contains(t, errOut, "next_cursor:")
			_, out, _ = ctl(cenv, "pipeline", "list", "--symbol", "edge-2", "--limit", "2", "--all")
			require.Equal(t, 3, strings.Count(out, "\n"))

			code, _, errOut = ctl(map[string]string{"EUTERPE_CENTRAL_URL": url, "EUTERPE_OPERATOR_TOKEN": "eop_wrong"}, "pipeline", "get", first.JobID)
			require.Equal(t, 1, code)
			require.Contains(t, errOut, "unauthorized")
			code, _, _ = ctl(map[string]string{"EUTERPE_CENTRAL_URL": url}, "pipeline", "get", first.JobID)
			require.Equal(t, 2, code)
			code, _, _ = ctl(cenv, "pipeline", "enqueue", "--type", "edge_daily")
			require.Equal(t, 2, code)
		})
	}
}

// An argument a pipeline or edges command has no use for is refused with
// exit 2 and one line naming it, before anything reaches central: it is
// most often a value meant for a flag, and dropping it would act on
// something other than what was asked.
func TestCommandsRefuseUnusedArguments(t *testing.T) {
	url, d, _ := startCentral(t, "sqlite")
	op, err := d.Operators.Create(context.Background(), "ctl")
	require.NoError(t, err)
	proxy, conns := cutProxy(t, strings.TrimPrefix(url, "http://"), 1<<20, false)
	env := map[string]string{"EUTERPE_CENTRAL_URL": proxy, "EUTERPE_OPERATOR_TOKEN": op.Token}
	const id = "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d"
	for _, args := range [][]string{
		{"pipeline", "enqueue", "--type", "edge_daily", "--symbol", "edge-1", "--asof", "2026-01-02", "extra"},
		{"pipeline", "enqueue", "extra", "--type", "edge_daily", "--symbol", "edge-1", "--asof", "2026-01-02"},
		{"pipeline", "get", id, "extra"},
		{"pipeline", "redrive", id, "extra"},
		{"pipeline", "list", "--status", "failed", "extra"},
		{"pipeline", "dlq", "extra"},
		{"pipeline", "refused", "--symbol", "S", "extra"},
		{"edges", "list", "extra"},
		{"edges", "get", "edge-1", "extra"},
		{"edges", "jobs", "edge-1", "extra", "--limit", "5"},
		{"edges", "events", "edge-1", id, "extra"},
		{"edges", "tail", "extra", "--count", "1"},
		{"version", "extra"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			code, out, errOut := ctl(env, args...)
			require.Equal(t, 2, code, errOut)
			require.Empty(t, out)
			require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
			require.Contains(t, errOut, `"extra"`)
			require.Zero(t, conns.Load(), "a request reached central")
		})
	}
}

// The next_cursor that pipeline list and dlq print when they stop after a
// page is what --cursor takes to go on from there: together the pages
// hold every job once, and a cursor central never made is its 400.
func TestPipelineListCursor(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			flaky := filepath.Join(t.TempDir(), "flaky.sh")
			require.NoError(t, os.WriteFile(flaky, []byte("#!/bin/sh\nexit 1\n"), 0o755))
			env := append(os.Environ(), "EUTERPE_DATABASE_URL="+sqltest.URL(t, e), "EUTERPE_KEYRING=k1:"+credentials.NewKey(),
				"EUTERPE_STATE_DIR="+t.TempDir(), "EUTERPE_PIPELINE_TYPES=flaky=exec:"+flaky,
				"EUTERPE_PIPELINE_BACKOFF_BASE=1ms", "EUTERPE_PIPELINE_BACKOFF_MAX=1ms", "EUTERPE_PIPELINE_POLL=20ms")
			url, token := startCentralProcess(t, env)
			cenv := map[string]string{"EUTERPE_CENTRAL_URL": url, "EUTERPE_OPERATOR_TOKEN": token}
			for _, d := range []string{"2026-01-03", "2026-01-04", "2026-01-05"} {
				code, _, errOut := ctl(cenv, "pipeline", "enqueue", "--type", "flaky", "--symbol", "S", "--asof", d)
				require.Equal(t, 0, code, errOut)
			}
			require.Eventually(t, func() bool {
				_, out, _ := ctl(cenv, "pipeline", "dlq", "--symbol", "S")
				return strings.Count(out, "\n") == 3
			}, 30*time.Second, 50*time.Millisecond)

			for _, cmd := range []string{"list", "dlq"} {
				code, first, errOut := ctl(cenv, "pipeline", cmd, "--symbol", "S", "--limit", "2")
				require.Equal(t, 0, code, errOut)
				require.Equal(t, 2, strings.Count(first, "\n"), cmd)
				_, after, ok := strings.Cut(errOut, "next_cursor: ")
				require.True(t, ok, errOut)
				cursor, _, _ := strings.Cut(after, " ")
				require.NotEmpty(t, cursor)

				code, rest, errOut := ctl(cenv, "pipeline", cmd, "--symbol", "S", "--limit", "2", "--cursor", cursor)
				require.Equal(t, 0, code, errOut)
				require.Equal(t, 1, strings.Count(rest, "\n"), cmd)
				require.NotContains(t, errOut, "next_cursor", "the last page")
				seen := map[string]bool{}
				for _, line := range strings.Split(strings.TrimSpace(first+rest), "\n") {
					var j struct {
						JobID string `json:"job_id"`
					}
					require.NoError(t, json.Unmarshal([]byte(line), &j))
					require.False(t, seen[j.JobID], "job %s on two pages", j.JobID)
					seen[j.JobID] = true
				}
				require.Len(t, seen, 3)

				code, _, errOut = ctl(cenv, "pipeline", cmd, "--cursor", "not-a-cursor")
				require.Equal(t, 1, code, errOut)
				require.Contains(t, errOut, "invalid_request")
				require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
			}
		})
	}
}

// pipeline refused lists the scheduled days central refused for good, one
// JSON object a line, a page at a time like pipeline list: the
// next_cursor it prints goes on with --cursor, --all follows every page,
// --type and --symbol filter, and what central refuses (a cursor it never
// made, a filter that is not text) is exit 1 with its code.
func TestPipelineRefusedCommand(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			noop := filepath.Join(t.TempDir(), "noop.sh")
			require.NoError(t, os.WriteFile(noop, []byte("#!/bin/sh\necho '{\"result_ref\":\"mem://done\"}'\n"), 0o755))
			// A control character is INVALID_MESSAGE, a symbol over the
			// message cap MESSAGE_TOO_LARGE: the scheduler refuses each of
			// their three catch-up days once.
			const invalid = "bad\x01sym"
			large := strings.Repeat("x", 5000)
			env := append(os.Environ(), "EUTERPE_DATABASE_URL="+sqltest.URL(t, e), "EUTERPE_KEYRING=k1:"+credentials.NewKey(),
				"EUTERPE_STATE_DIR="+t.TempDir(), "EUTERPE_PIPELINE_TYPES=noop=exec:"+noop,
				"EUTERPE_PIPELINE_SYMBOLS=noop="+invalid+"|"+large, "EUTERPE_PIPELINE_CATCHUP_DAYS=3", "EUTERPE_PIPELINE_POLL=20ms")
			url, token := startCentralProcess(t, env)
			cenv := map[string]string{"EUTERPE_CENTRAL_URL": url, "EUTERPE_OPERATOR_TOKEN": token}

			type day struct {
				JobType   string `json:"job_type"`
				Symbol    string `json:"symbol"`
				Asof      string `json:"asof"`
				ErrorCode string `json:"error_code"`
				RefusedAt string `json:"refused_at"`
			}
			parse := func(out string) []day {
				t.Helper()
				var ds []day
				for _, line := range strings.FieldsFunc(out, func(r rune) bool { return r == '\n' }) {
					var d day
					require.NoError(t, json.Unmarshal([]byte(line), &d), line)
					ds = append(ds, d)
				}
				return ds
			}
			var all []day
			require.Eventually(t, func() bool {
				code, out, errOut := ctl(cenv, "pipeline", "refused", "--all", "--limit", "4")
				if code != 0 || strings.Contains(errOut, "next_cursor") {
					return false
				}
				all = parse(out)
				return len(all) == 6
			}, 30*time.Second, 50*time.Millisecond)
			codes := map[string]string{invalid: "INVALID_MESSAGE", large: "MESSAGE_TOO_LARGE"}
			for i, d := range all {
				require.Equal(t, "noop", d.JobType)
				require.Equal(t, codes[d.Symbol], d.ErrorCode, d.Symbol)
				require.NotEmpty(t, d.RefusedAt)
				if i > 0 {
					require.LessOrEqual(t, d.Asof, all[i-1].Asof, "latest day first")
				}
			}

			// A page, its next_cursor, and the pages after it: every day once.
			code, first, errOut := ctl(cenv, "pipeline", "refused", "--limit", "4")
			require.Equal(t, 0, code, errOut)
			require.Len(t, parse(first), 4)
			_, after, ok := strings.Cut(errOut, "next_cursor: ")
			require.True(t, ok, errOut)
			cursor, _, _ := strings.Cut(after, " ")
			code, rest, errOut := ctl(cenv, "pipeline", "refused", "--limit", "4", "--cursor", cursor)
			require.Equal(t, 0, code, errOut)
			require.NotContains(t, errOut, "next_cursor", "the last page")
			require.Equal(t, all, parse(first+rest))

			code, out, errOut := ctl(cenv, "pipeline", "refused", "--type", "noop", "--symbol", invalid)
			require.Equal(t, 0, code, errOut)
			got := parse(out)
			require.Len(t, got, 3)
			for _, d := range got {
				require.Equal(t, invalid, d.Symbol)
			}
			code, out, errOut = ctl(cenv, "pipeline", "refused", "--type", "edge_daily")
			require.Equal(t, 0, code, errOut)
			require.Empty(t, out)

			for _, args := range [][]string{{"--cursor", "not-a-cursor"}, {"--symbol", "\xff"}} {
				code, out, errOut = ctl(cenv, append([]string{"pipeline", "refused"}, args...)...)
				require.Equal(t, 1, code, errOut)
				require.Empty(t, out)
				require.Contains(t, errOut, "invalid_request")
				require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
			}
			code, _, errOut = ctl(map[string]string{"EUTERPE_CENTRAL_URL": url, "EUTERPE_OPERATOR_TOKEN": "eop_wrong"}, "pipeline", "refused")
			require.Equal(t, 1, code)
			require.Contains(t, errOut, "unauthorized")
			code, _, _ = ctl(map[string]string{"EUTERPE_CENTRAL_URL": url}, "pipeline", "refused")
			require.Equal(t, 2, code)
		})
	}
}
