package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "stage.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

var msg = JobMessage{JobID: "j1", IdempotencyKey: MakeIdempotencyKey("prices", "AAPL", "2026-01-02"), JobType: "prices", Symbol: "AAPL", Asof: "2026-01-02", RequestedBy: "t", Attempt: 1}

// Exec job types: the message on stdin, the answer on stdout; anything
// outside the contract's answers is refused and recorded as such.
func TestExecAnswers(t *testing.T) {
	cases := []struct {
		name, body string
		ref, code  string
		msgHas     string
	}{
		{"result", `cat >/dev/null; echo '{"result_ref":"s3://b/k.json"}'`, "s3://b/k.json", "", ""},
		{"reads the message", `grep -q '"symbol":"AAPL"' && echo '{"result_ref":"ok"}'`, "ok", "", ""},
		{"contract error", `echo '{"error_code":"UPSTREAM_EMPTY","error_message":"no prices"}'`, "", CodeUpstreamEmpty, "no prices"},
		{"contract error, non-zero exit", `echo '{"error_code":"QUALITY_FAILED","error_message":"gap"}'; exit 3`, "", CodeQualityFailed, "gap"},
		{"garbage", `echo 'hello world'`, "", CodeInvalidAnswer, "refused answer"},
		{"empty", `true`, "", CodeInvalidAnswer, "refused answer"},
		{"unknown code", `echo '{"error_code":"DISK_ON_FIRE","error_message":"x"}'`, "", CodeInvalidAnswer, "DISK_ON_FIRE"},
		{"enqueue-side code", `echo '{"error_code":"IDEMPOTENCY_CONFLICT"}'`, "", CodeInvalidAnswer, "not one of"},
		{"both", `echo '{"result_ref":"a","error_code":"UPSTREAM_EMPTY"}'`, "", CodeInvalidAnswer, "exactly one"},
		{"unknown field", `echo '{"result_ref":"a","extra":1}'`, "", CodeInvalidAnswer, "refused answer"},
		{"trailing data", `echo '{"result_ref":"a"} {"result_ref":"b"}'`, "", CodeInvalidAnswer, "trailing"},
		{"non-zero exit", `echo boom >&2; exit 7`, "", CodeStageUnavailable, "boom"},
		{"killed", `kill -9 $$`, "", CodeStageUnavailable, "signal"},
		{"timeout", `sleep 30 & wait`, "", CodeStageUnavailable, "no answer within"},
		{"huge", `head -c 200000 /dev/zero | tr '\0' a`, "", CodeInvalidAnswer, "more than"},
		{"crash flooding stdout", `head -c 200000 /dev/zero | tr '\0' a; echo dying >&2; exit 3`, "", CodeStageUnavailable, "dying"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A shell's start on a busy machine can take a good part of a
			// second: only the case about the timeout gets a short one.
			timeout := 10 * time.Second
			if c.name == "timeout" {
				timeout = 700 * time.Millisecond
			}
			start := time.Now()
			ref, err := Exec{Path: script(t, c.body), Timeout: timeout}.Run(context.Background(), msg)
			if ref != c.ref || ErrorCode(err) != c.code {
				t.Fatalf("ref %q err %v; want %q %s", ref, err, c.ref, c.code)
			}
			if c.msgHas != "" && !strings.Contains(err.Error(), c.msgHas) {
				t.Fatalf("error %q lacks %q", err, c.msgHas)
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("took %v: the process group was not killed", time.Since(start))
			}
		})
	}
}

func TestHTTPAnswers(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		ref    string
		code   string
	}{
		{"result", 200, `{"result_ref":"r"}`, "r", ""},
		{"error answer", 422, `{"error_code":"TRANSFORM_INVALID","error_message":"bad"}`, "", CodeTransformInvalid},
		{"garbage", 200, `<html>`, "", CodeInvalidAnswer},
		{"unknown code", 200, `{"error_code":"NOPE"}`, "", CodeInvalidAnswer},
		{"5xx", 503, `busy`, "", CodeStageUnavailable},
		{"result with 4xx", 400, `{"result_ref":"r"}`, "", CodeInvalidAnswer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if r.Method != http.MethodPost || !strings.Contains(string(b), `"job_id":"j1"`) {
					w.WriteHeader(400)
					return
				}
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			}))
			defer srv.Close()
			ref, err := HTTP{URL: srv.URL, Timeout: time.Second}.Run(context.Background(), msg)
			if ref != c.ref || ErrorCode(err) != c.code {
				t.Fatalf("ref %q err %v; want %q %s", ref, err, c.ref, c.code)
			}
		})
	}
	t.Run("refused connection", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		if _, err := (HTTP{URL: srv.URL, Timeout: time.Second}).Run(context.Background(), msg); ErrorCode(err) != CodeStageUnavailable {
			t.Fatalf("%v", err)
		}
	})
}

func TestParseTypes(t *testing.T) {
	got, err := ParseTypes("prices=exec:/usr/local/bin/prices, fx=http:https://fx.example/run", time.Minute, nil)
	if err != nil || len(got) != 2 || got[0].Name != "prices" || got[1].Name != "fx" {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"prices", "prices=exec:relative", "Prices=exec:/x", "a=ftp:x", "a=exec:/x,a=exec:/y", "a=http:ftp://x"} {
		if _, err := ParseTypes(bad, time.Minute, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Through the worker, a garbage answer is recorded: failed, INVALID_ANSWER,
// logged with alert, not retried; a crashing program is retried.
func TestExecGarbageRecorded(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db, nil)
		_ = f.types.Register(JobType{Name: "garbage", Runner: Exec{Path: script(t, `echo '{"error_code":"ALL_GOOD"}'`), Timeout: 5 * time.Second}})
		_ = f.types.Register(JobType{Name: "crash", Runner: Exec{Path: script(t, `exit 1`), Timeout: 5 * time.Second}})
		g := f.submit(t, "garbage", "AAPL", "2026-01-02")
		c := f.submit(t, "crash", "AAPL", "2026-01-02")
		f.runUntil(t, 2*time.Second, "both outcomes", func() bool {
			return f.get(t, g.JobID).Status == StatusFailed && f.get(t, c.JobID).Status == StatusDeadLetter
		})
		r := f.get(t, g.JobID)
		if r.LastError.ErrorCode != CodeInvalidAnswer || r.Attempts != 1 || !strings.Contains(r.LastError.ErrorMessage, "ALL_GOOD") {
			t.Fatalf("%+v %+v", r, r.LastError)
		}
		if rc := f.get(t, c.JobID); rc.Attempts != 5 || rc.LastError.ErrorCode != CodeStageUnavailable {
			t.Fatalf("%+v %+v", rc, rc.LastError)
		}
		if !strings.Contains(f.logs.String(), `"alert":true`) {
			t.Fatal("no alert logged")
		}
	})
}

// fakeSecrets sets central's secrets in the test's environment, as a pod
// has them, and returns them.
func fakeSecrets(t *testing.T) (keyring, dbPassword string) {
	t.Helper()
	keyring = "k1:" + credentials.NewKey()
	dbPassword = "hunter2-db-password"
	t.Setenv("EUTERPE_KEYRING", keyring)
	t.Setenv("EUTERPE_DATABASE_URL", "postgres://euterpe:"+dbPassword+"@db.internal:5432/euterpe?sslmode=require")
	t.Setenv("EUTERPE_OPERATOR_TOKEN", "eop_secret_token")
	return keyring, dbPassword
}

// An exec job type's program gets a minimal environment: PATH, HOME, LANG
// and TZ=UTC, never central's EUTERPE_* variables.
func TestExecEnvironment(t *testing.T) {
	keyring, pw := fakeSecrets(t)
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
	// The whole environment, one variable a line, as the result_ref.
	p := script(t, `cat >/dev/null; printf '{"result_ref":"%s"}' "$(env | sort | tr '\n' ';' | tr -d '"\\')"`)
	ref, err := Exec{Path: p, Timeout: 5 * time.Second}.Run(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"EUTERPE_", keyring, pw, "eop_secret_token", "aws-secret"} {
		if strings.Contains(ref, bad) {
			t.Errorf("the program saw %q: %s", bad, ref)
		}
	}
	for _, want := range []string{"TZ=UTC;", "PATH=" + os.Getenv("PATH") + ";", "LANG=C.UTF-8;"} {
		if !strings.Contains(ref, want) {
			t.Errorf("environment lacks %q: %s", want, ref)
		}
	}
	for _, kv := range ExecEnv() {
		if strings.HasPrefix(kv, "EUTERPE_") {
			t.Errorf("ExecEnv has %s", kv)
		}
	}
}

// End to end on both engines: a program that echoes central's secrets
// into its result_ref gets none to echo, and what it answers is redacted
// before it is stored and returned (GET /v1/pipeline/jobs/{id}); a plain
// reference is stored as it is.
func TestExecResultRefHoldsNoSecrets(t *testing.T) {
	keyring, pw := fakeSecrets(t)
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db, nil)
		_ = f.types.Register(JobType{Name: "leaky", Runner: Exec{Timeout: 5 * time.Second, Path: script(t,
			`cat >/dev/null; printf '{"result_ref":"s3://bucket/key keyring=%s db=%s"}' "$EUTERPE_KEYRING" "$EUTERPE_DATABASE_URL"`)}})
		_ = f.types.Register(JobType{Name: "dsn", Runner: Exec{Timeout: 5 * time.Second, Path: script(t,
			`cat >/dev/null; echo '{"result_ref":"DATABASE_URL=postgres://euterpe:`+pw+`@db.internal/euterpe password=`+pw+`"}'`)}})
		_ = f.types.Register(JobType{Name: "plain", Runner: Exec{Timeout: 5 * time.Second, Path: script(t,
			`cat >/dev/null; echo '{"result_ref":"s3://bucket/edge_daily/edge-1/2026-01-02.json"}'`)}})
		leaky := f.submit(t, "leaky", "AAPL", "2026-01-02")
		dsn := f.submit(t, "dsn", "AAPL", "2026-01-02")
		plain := f.submit(t, "plain", "AAPL", "2026-01-02")
		ids := []string{leaky.JobID, dsn.JobID, plain.JobID}
		f.runUntil(t, 10*time.Second, "all succeeded", func() bool {
			for _, id := range ids {
				if f.get(t, id).Status != StatusSucceeded {
					return false
				}
			}
			return true
		})
		base := apiServer(t, f)
		refs := map[string]string{}
		for _, id := range ids {
			resp, err := http.Get(base + "/v1/pipeline/jobs/" + id)
			if err != nil {
				t.Fatal(err)
			}
			var rec JobRecord
			err = json.NewDecoder(resp.Body).Decode(&rec)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("get %s: %d %v", id, resp.StatusCode, err)
			}
			if stored := f.get(t, id).ResultRef; stored != rec.ResultRef {
				t.Fatalf("stored %q, returned %q", stored, rec.ResultRef)
			}
			for _, bad := range []string{keyring, strings.TrimPrefix(keyring, "k1:"), pw} {
				if strings.Contains(rec.ResultRef, bad) {
					t.Errorf("job %s: result_ref %q holds a secret", id, rec.ResultRef)
				}
			}
			refs[id] = rec.ResultRef
		}
		if got := refs[leaky.JobID]; got != "s3://bucket/key keyring= db=" {
			t.Errorf("leaky: %q", got)
		}
		if got := refs[dsn.JobID]; got != "DATABASE_URL=postgres://euterpe:[REDACTED]@db.internal/euterpe password=[REDACTED]" {
			t.Errorf("dsn: %q", got)
		}
		if got := refs[plain.JobID]; got != "s3://bucket/edge_daily/edge-1/2026-01-02.json" {
			t.Errorf("plain: %q", got)
		}
		if strings.Contains(f.logs.String(), pw) {
			t.Error("the password reached the log")
		}
	})
}

// A crashing program's stored error ends with the end of its stderr — the
// error a traceback ends with, past the first 512 bytes — with secrets in
// it still hidden.
func TestExecErrorKeepsStderrEnd(t *testing.T) {
	var frames strings.Builder
	frames.WriteString("echo 'Traceback (most recent call last):' >&2\n")
	for i := range 12 {
		fmt.Fprintf(&frames, "echo '  File \"/opt/stages/prices/fetch_stage_%d.py\", line %d, in run' >&2\necho '    return handle(job[\"messages\"])' >&2\n", i, 100+i)
	}
	cases := []struct {
		name, last, has, hidden string
	}{
		{"traceback", `KeyError: 'messages'`, `KeyError: 'messages'`, ""},
		{"secret in the end", `ConnectionError: postgres://u:hunter2@db/x refused, api_key=sk-live-9`, `@db/x refused, api_key=[REDACTED]`, "hunter2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Exec{Path: script(t, frames.String()+"echo \""+c.last+"\" >&2\nexit 1"), Timeout: 5 * time.Second}.Run(context.Background(), msg)
			var je *JobError
			if !errors.As(err, &je) || je.Code != CodeStageUnavailable {
				t.Fatalf("err %v; want %s", err, CodeStageUnavailable)
			}
			if !strings.HasSuffix(je.Message, c.has) || len(je.Message) > 512 || !strings.Contains(je.Message, "exit status 1: …") {
				t.Fatalf("message %q (%d bytes) does not end with the end of stderr, %q", je.Message, len(je.Message), c.has)
			}
			if c.hidden != "" && (strings.Contains(je.Message, c.hidden) || strings.Contains(je.Message, "sk-live")) {
				t.Fatalf("message %q shows a secret", je.Message)
			}
		})
	}
}
