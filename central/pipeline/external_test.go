package pipeline

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			ref, err := Exec{Path: script(t, c.body), Timeout: 700 * time.Millisecond}.Run(context.Background(), msg)
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
