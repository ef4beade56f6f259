package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// pythonSignature computes the contract's signature with Python's hmac
// module, independently of this module's code.
func pythonSignature(t *testing.T, secret, ts, nonce string, body []byte) string {
	t.Helper()
	py := testsvc.Program(t, "python3") // skipped locally without it, a failure in CI
	cmd := exec.Command(py, "-c", `import hmac,hashlib,sys
s,ts,n=sys.argv[1:4]
print("v1="+hmac.new(s.encode(),ts.encode()+b"."+n.encode()+b"."+sys.stdin.buffer.read(),hashlib.sha256).hexdigest())`, secret, ts, nonce)
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func TestDeliversSignedWebhook(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, nil)
		f.start(t, testConfig(), "w1")
		id := f.addEvent(t, "job_1", 1, rc.URL+"/hook?token=abc")
		r := f.waitStatus(t, id, "delivered")
		if r.Attempts != 1 || r.Code == nil || *r.Code != 204 {
			t.Fatalf("row %+v", r)
		}
		got := rc.receipts()
		if len(got) != 1 {
			t.Fatalf("%d requests", len(got))
		}
		h, body := got[0].Header, got[0].Body
		ts, nonce := h.Get("X-Euterpe-Timestamp"), h.Get("X-Euterpe-Nonce")
		if want := pythonSignature(t, f.secret, ts, nonce, body); h.Get("X-Euterpe-Signature") != want {
			t.Fatalf("signature %q, independent check %q", h.Get("X-Euterpe-Signature"), want)
		}
		if h.Get("X-Euterpe-Event-Id") != id || h.Get("Content-Type") != "application/json" {
			t.Fatalf("headers %v", h)
		}
		if n, _ := strconv.ParseInt(ts, 10, 64); time.Since(time.Unix(n, 0)).Abs() > time.Minute {
			t.Fatalf("timestamp %s", ts)
		}
		var p map[string]any
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"event_id", "job_id", "sequence", "status", "occurred_at"} {
			if _, ok := p[k]; !ok {
				t.Fatalf("payload lacks %s: %s", k, body)
			}
		}
		if strings.Contains(f.logs.String(), f.secret) {
			t.Fatal("secret in logs")
		}
	})
}

func TestRetriesUntilDelivered(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		long := strings.Repeat("x", 2000)
		rc := newReceiver(t, func(n int, _ *http.Request, _ []byte) int {
			if n == 1 {
				return 500
			}
			return 200
		})
		// 500 then 200: the failure is recorded with a capped body snippet.
		rc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc.serve(&captureWriter{ResponseWriter: w, body: long}, r)
		})
		f.start(t, testConfig(), "w1")
		id := f.addEvent(t, "job_1", 1, rc.URL)
		r := f.waitStatus(t, id, "delivered")
		if r.Attempts != 2 {
			t.Fatalf("attempts %d, want 2", r.Attempts)
		}
		if len(rc.receipts()) != 2 {
			t.Fatalf("%d requests", len(rc.receipts()))
		}
		n0, n1 := rc.receipts()[0].Header.Get("X-Euterpe-Nonce"), rc.receipts()[1].Header.Get("X-Euterpe-Nonce")
		e0, e1 := rc.receipts()[0].Header.Get("X-Euterpe-Event-Id"), rc.receipts()[1].Header.Get("X-Euterpe-Event-Id")
		if n0 == n1 || e0 != e1 {
			t.Fatalf("nonce must change and event id must not: %s %s %s %s", n0, n1, e0, e1)
		}
	})
}

// captureWriter answers with a long body on errors, to check the 512 cap.
type captureWriter struct {
	http.ResponseWriter
	body string
}

func (c *captureWriter) WriteHeader(code int) {
	c.ResponseWriter.WriteHeader(code)
	if code >= 400 {
		_, _ = c.ResponseWriter.Write([]byte(c.body))
	}
}

func TestStoredErrorIsCapped(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, func(int, *http.Request, []byte) int { return 500 })
		rc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc.serve(&captureWriter{ResponseWriter: w, body: strings.Repeat("é", 2000)}, r)
		})
		cfg := testConfig()
		cfg.BackoffBase, cfg.BackoffMax = time.Hour, time.Hour
		f.start(t, cfg, "w1")
		id := f.addEvent(t, "job_1", 1, rc.URL)
		var r row
		waitFor(t, "a recorded failure", 10*time.Second, func() bool { r = f.row(t, id); return r.LastErr != nil })
		if len(*r.LastErr) > 512 || !strings.HasPrefix(*r.LastErr, "receiver answered 500: é") || r.Status != "pending" {
			t.Fatalf("last_error (%d bytes) %q, status %s", len(*r.LastErr), *r.LastErr, r.Status)
		}
	})
}

// A receiver's error page in Latin-1, or with a NUL, is recorded (as
// U+FFFD) and the event dead-lettered after its attempts: Postgres refuses
// such bytes in text, and a refused write left the failure unrecorded and
// the event resent at every lease expiry, never dead-lettered.
func TestReceiverErrorBodyNotUTF8IsRecorded(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, func(int, *http.Request, []byte) int { return 500 })
		rc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc.serve(&captureWriter{ResponseWriter: w, body: "Erreur interne: r\xe9essayez\x00 plus tard"}, r)
		})
		cfg := testConfig()
		cfg.MaxAttempts = 2
		f.start(t, cfg, "w1")
		id := f.addEvent(t, "job_1", 1, rc.URL)
		r := f.waitStatus(t, id, "dead_letter")
		if r.Attempts != 2 || r.LastErr == nil || *r.LastErr != "retries exhausted: receiver answered 500: Erreur interne: r\uFFFDessayez\uFFFD plus tard" {
			t.Fatalf("attempts %d last_error %q", r.Attempts, deref(r.LastErr))
		}
		if n := len(rc.receipts()); n != 2 {
			t.Fatalf("%d requests for 2 attempts", n)
		}
	})
}

func TestReceiverDownThenUp(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // down: connection refused
		f.start(t, testConfig(), "w1")
		id := f.addEvent(t, "job_1", 1, "http://"+addr+"/hook")
		var r row
		waitFor(t, "failed attempts", 10*time.Second, func() bool { r = f.row(t, id); return r.Attempts >= 2 })
		if r.Status == "delivered" || r.LastErr == nil || *r.LastErr != "connection refused" {
			t.Fatalf("row %+v", r)
		}
		var got sync.WaitGroup
		got.Add(1)
		var once sync.Once
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			once.Do(got.Done)
			w.WriteHeader(200)
		})}
		ln2, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("port reused by someone else: %v", err)
		}
		go func() { _ = srv.Serve(ln2) }()
		defer srv.Close()
		f.waitStatus(t, id, "delivered")
		got.Wait()
	})
}

func TestTimeoutIsAFailure(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, func(n int, _ *http.Request, _ []byte) int {
			if n == 1 {
				time.Sleep(700 * time.Millisecond) // beyond the 500 ms timeout
			}
			return 200
		})
		f.start(t, testConfig(), "w1")
		id := f.addEvent(t, "job_1", 1, rc.URL)
		r := f.waitStatus(t, id, "delivered")
		if r.Attempts != 2 {
			t.Fatalf("attempts %d, want 2 (timeout, then success)", r.Attempts)
		}
	})
}

func TestGoneDeadLettersAtOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, func(int, *http.Request, []byte) int { return http.StatusGone })
		_, m := f.start(t, testConfig(), "w1")
		id := f.addEvent(t, "job_1", 1, rc.URL)
		r := f.waitStatus(t, id, "dead_letter")
		if r.Attempts != 1 || *r.Code != 410 || !strings.Contains(*r.LastErr, "410 Gone") {
			t.Fatalf("row %+v", r)
		}
		waitCounter(t, m.DeadLetters, 1)
		if !strings.Contains(f.logs.String(), `"alert":true`) {
			t.Fatal("no alert logged")
		}
	})
}

func TestRetryAfterHonoured(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		for _, code := range []int{429, 503} {
			rc := newReceiver(t, nil)
			rc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rc.mu.Lock()
				n := len(rc.got) + 1
				rc.got = append(rc.got, receipt{At: time.Now()})
				rc.mu.Unlock()
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(code)
					return
				}
				w.WriteHeader(200)
			})
			cfg := testConfig()
			cfg.BackoffMax = 10 * time.Second
			ctx, cancel := context.WithCancel(context.Background())
			d, err := New(cfg, Options{Store: NewStore(db, nil), Secrets: &RequesterSecrets{Requesters: requesters.New(db, f.keys)}, Worker: "w"})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			id := f.addEvent(t, "job_"+strconv.Itoa(code), 1, rc.URL)
			f.waitStatus(t, id, "delivered")
			cancel()
			<-done
			got := rc.receipts()
			if len(got) != 2 {
				t.Fatalf("%d: %d requests", code, len(got))
			}
			if gap := got[1].At.Sub(got[0].At); gap < 900*time.Millisecond || gap > 3*time.Second {
				t.Fatalf("%d: retried after %s, want ~1s (Retry-After)", code, gap)
			}
		}
	})
}

func TestPerJobOrderAcrossDispatchers(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		const jobs, perJob = 12, 5
		var mu sync.Mutex
		acked := map[string]int64{}
		var violations []string
		n := 0
		rc := newReceiver(t, nil)
		rc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var p struct {
				JobID    string `json:"job_id"`
				Sequence int64  `json:"sequence"`
			}
			_ = json.NewDecoder(r.Body).Decode(&p)
			mu.Lock()
			defer mu.Unlock()
			n++
			if p.Sequence > 1 && acked[p.JobID] < p.Sequence-1 {
				violations = append(violations, p.JobID+"#"+strconv.FormatInt(p.Sequence, 10))
			}
			if n%3 == 0 { // every third request fails
				w.WriteHeader(500)
				return
			}
			if p.Sequence > acked[p.JobID] {
				acked[p.JobID] = p.Sequence
			}
			w.WriteHeader(200)
		})
		var ids []string
		for s := int64(1); s <= perJob; s++ {
			for j := range jobs {
				ids = append(ids, f.addEvent(t, "job_"+strconv.Itoa(j), s, rc.URL))
			}
		}
		f.start(t, testConfig(), "w1")
		f.start(t, testConfig(), "w2")
		for _, id := range ids {
			f.waitStatus(t, id, "delivered")
		}
		mu.Lock()
		defer mu.Unlock()
		if len(violations) > 0 {
			t.Fatalf("events sent before their predecessor was acknowledged: %v", violations)
		}
	})
}

func TestTwoDispatchersNeverSendOneEventAtOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, func(int, *http.Request, []byte) int {
			time.Sleep(5 * time.Millisecond)
			return 200
		})
		var ids []string
		for i := range 120 {
			ids = append(ids, f.addEvent(t, "job_"+strconv.Itoa(i), 1, rc.URL))
		}
		f.start(t, testConfig(), "w1")
		f.start(t, testConfig(), "w2")
		for _, id := range ids {
			f.waitStatus(t, id, "delivered")
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if rc.overlap != 0 || len(rc.got) != len(ids) {
			t.Fatalf("overlapping sends %d, requests %d for %d events", rc.overlap, len(rc.got), len(ids))
		}
	})
}

func TestDeadLetterAfterExhaustionThenRedrive(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		var mu sync.Mutex
		code := 500
		rc := newReceiver(t, func(int, *http.Request, []byte) int { mu.Lock(); defer mu.Unlock(); return code })
		cfg := testConfig()
		cfg.MaxAttempts = 3
		_, m := f.start(t, cfg, "w1")
		a := f.addEvent(t, "job_a", 1, rc.URL)
		b := f.addEvent(t, "job_b", 1, rc.URL)
		c := f.addEvent(t, "job_c", 1, rc.URL)
		for _, id := range []string{a, b, c} {
			r := f.waitStatus(t, id, "dead_letter")
			if r.Attempts != 3 || !strings.HasPrefix(*r.LastErr, "retries exhausted") {
				t.Fatalf("row %+v", r)
			}
		}
		waitCounter(t, m.DeadLetters, 3)
		mu.Lock()
		code = 200
		mu.Unlock()
		st := NewStore(db, nil)
		ctx := context.Background()
		if _, err := st.Redrive(ctx, RedriveFilter{}); !errors.Is(err, ErrEmptyFilter) {
			t.Fatalf("empty filter: %v", err)
		}
		if n, err := st.Redrive(ctx, RedriveFilter{EventIDs: []string{a}}); err != nil || n != 1 {
			t.Fatalf("redrive by id: %d %v", n, err)
		}
		f.waitStatus(t, a, "delivered")
		if n, err := st.Redrive(ctx, RedriveFilter{JobID: "job_b"}); err != nil || n != 1 {
			t.Fatalf("redrive by job: %d %v", n, err)
		}
		f.waitStatus(t, b, "delivered")
		if n, err := st.Redrive(ctx, RedriveFilter{Since: time.Now().Add(-time.Hour)}); err != nil || n != 1 {
			t.Fatalf("redrive since: %d %v", n, err)
		}
		if r := f.waitStatus(t, c, "delivered"); r.Attempts != 1 {
			t.Fatalf("redriven event attempts %d, want a fresh count", r.Attempts)
		}
		if n, _ := st.DeadLetterCount(ctx); n != 0 {
			t.Fatalf("dead letters left: %d", n)
		}
	})
}

func TestRotationOverlapSignsWithBoth(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, nil)
		ctx := context.Background()
		reqs := requesters.New(db, f.keys)
		rot, err := reqs.RotateSecret(ctx, f.req, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if rot.Version != 2 || rot.Secret == f.secret {
			t.Fatalf("rotation %+v", rot.Version)
		}
		f.start(t, testConfig(), "w1")
		id := f.addEvent(t, "job_1", 1, rc.URL)
		f.waitStatus(t, id, "delivered")
		got := rc.receipts()[0]
		sigs := strings.Fields(got.Header.Get("X-Euterpe-Signature"))
		ts, nonce := got.Header.Get("X-Euterpe-Timestamp"), got.Header.Get("X-Euterpe-Nonce")
		if len(sigs) != 2 || sigs[0] != pythonSignature(t, rot.Secret, ts, nonce, got.Body) ||
			sigs[1] != pythonSignature(t, f.secret, ts, nonce, got.Body) {
			t.Fatalf("signatures %v", sigs)
		}
		for _, s := range []string{rot.Secret, f.secret} {
			v := webhook.NewVerifier([]byte(s))
			if _, err := v.Verify(ctx, got.Header, got.Body, time.Now()); err != nil {
				t.Fatalf("receiver with one of the secrets: %v", err)
			}
		}
		// After the overlap only the new secret signs.
		if _, err := reqs.RotateSecret(ctx, f.req, 0); err != nil {
			t.Fatal(err)
		}
		src := &RequesterSecrets{Requesters: reqs}
		ss, err := src.Secrets(ctx, f.req, time.Now())
		if err != nil || len(ss) != 1 {
			t.Fatalf("after overlap: %d secrets, %v", len(ss), err)
		}
		if _, err := reqs.RotateSecret(ctx, "nobody", time.Hour); !errors.Is(err, requesters.ErrNotFound) {
			t.Fatalf("rotated an unknown requester: %v", err)
		}
		if strings.Contains(f.logs.String(), rot.Secret) {
			t.Fatal("secret in logs")
		}
	})
}

func TestRefusesPrivateDestinationsAtSend(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, nil)
		cfg := testConfig()
		cfg.AllowPrivate = false
		f.start(t, cfg, "w1")
		port := rc.URL[strings.LastIndex(rc.URL, ":")+1:]
		// An IP literal and a name that resolves to loopback (the DNS
		// rebinding case): both refused after resolution, never sent.
		for _, u := range []string{rc.URL, "http://localhost:" + port + "/"} {
			id := f.addEvent(t, "job_"+u, 1, u)
			r := f.waitStatus(t, id, "dead_letter")
			if !strings.Contains(*r.LastErr, "destination refused") {
				t.Fatalf("%s: %+v", u, r)
			}
		}
		if len(rc.receipts()) != 0 {
			t.Fatal("a request reached the private receiver")
		}
	})
}

// waitCounter waits until c reaches want: the dispatcher counts a dead
// letter after its row commits, so a test that saw the row may be early.
func waitCounter(t *testing.T, c prometheus.Counter, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := counterValue(t, c)
		if v == want {
			return
		}
		if v > want || time.Now().After(deadline) {
			t.Fatalf("dead-letter metric %v, want %v", v, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestDeadLetterByAge: a receiver that always fails dead-letters the event
// once it is older than MaxAge, long before the attempt ceiling: several
// attempts were made, the stored reason says the retries are exhausted, and
// the event was dead-lettered no earlier than MaxAge after its creation.
func TestDeadLetterByAge(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, func(int, *http.Request, []byte) int { return http.StatusInternalServerError })
		cfg := testConfig()
		cfg.MaxAge = 300 * time.Millisecond
		cfg.MaxAttempts = 10000
		_, m := f.start(t, cfg, "w1")
		id := f.addEvent(t, "job_age", 1, rc.URL)
		r := f.waitStatus(t, id, "dead_letter")
		if r.Attempts < 2 || r.Attempts >= cfg.MaxAttempts || r.Code == nil || *r.Code != http.StatusInternalServerError ||
			r.LastErr == nil || !strings.HasPrefix(*r.LastErr, "retries exhausted") {
			t.Fatalf("row %+v (last_error %v)", r, r.LastErr)
		}
		var created, dead int64
		if err := db.QueryRow(db.Rebind(`SELECT created_at, dead_lettered_at FROM job_outbox_events WHERE event_id = ?`), id).Scan(&created, &dead); err != nil {
			t.Fatal(err)
		}
		if age := sqldb.FromMicros(dead).Sub(sqldb.FromMicros(created)); age < cfg.MaxAge {
			t.Fatalf("dead-lettered %s after creation, before MaxAge %s", age, cfg.MaxAge)
		}
		if got := len(rc.receipts()); got != r.Attempts {
			t.Fatalf("receiver saw %d requests, row counts %d attempts", got, r.Attempts)
		}
		waitCounter(t, m.DeadLetters, 1)
	})
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// A receiver whose error page echoes the request URI must not put the
// webhook URL's query token into last_error or the logs.
func TestReceiverEchoOfURLIsRedacted(t *testing.T) {
	const token = "tok_9f2c41d7e8b35a60"
	cases := []struct {
		name string
		code int
		echo func(r *http.Request) string
	}{
		{"request URI 404", http.StatusNotFound, func(r *http.Request) string { return "no route for " + r.RequestURI }},
		{"URL 500", http.StatusInternalServerError, func(r *http.Request) string { return "failed: " + r.URL.String() }},
		{"absolute URL 500", http.StatusInternalServerError, func(r *http.Request) string {
			return "POST http://user:pw_" + token + "@" + r.Host + r.URL.String() + " failed"
		}},
		{"decoded query 500", http.StatusInternalServerError, func(r *http.Request) string {
			q, _ := url.QueryUnescape(r.URL.RawQuery)
			return "bad params " + q
		}},
		{"escaped query 404", http.StatusNotFound, func(r *http.Request) string {
			return "<a href=\"/login?next=" + url.QueryEscape(r.RequestURI) + "\">login</a> " + html.EscapeString(r.URL.RawQuery)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				f := newFixture(t, db)
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(tc.code)
					_, _ = io.WriteString(w, tc.echo(r))
				}))
				t.Cleanup(srv.Close)
				cfg := testConfig()
				cfg.MaxAttempts = 2
				f.start(t, cfg, "w1")
				u := strings.Replace(srv.URL, "http://", "http://hookuser:pw_"+token+"@", 1) + "/hook?token=" + token + "&scope=a%2Fb"
				id := f.addEvent(t, "job_1", 1, u)
				r := f.waitStatus(t, id, "dead_letter")
				if r.LastErr == nil || !strings.Contains(*r.LastErr, "receiver answered") || len(*r.LastErr) > 512 {
					t.Fatalf("last_error %q", deref(r.LastErr))
				}
				logs := f.logs.String()
				for _, s := range []string{*r.LastErr, logs} {
					if strings.Contains(s, token[:12]) || strings.Contains(s, "token=") {
						t.Fatalf("token leaked: last_error %q\nlogs %s", *r.LastErr, logs)
					}
				}
				if !strings.Contains(logs, "outbox delivery failed; will retry") {
					t.Fatalf("no retry log: %s", logs)
				}
			})
		})
	}
}
