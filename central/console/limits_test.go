package console_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// openTail opens the console's live fleet tail with cl's cookies and
// returns a channel of the stream's lines (closed when the stream ends).
func openTail(t *testing.T, c *central, cl *client) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/ui/fleet/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := (&http.Client{Jar: cl.http.Jar}).Do(req) // no overall timeout: a stream
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		t.Fatalf("tail: %d", res.StatusCode)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

// waitLine waits for a line containing want; false when the stream ended
// or d passed first.
func waitLine(lines <-chan string, want string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return false
			}
			if strings.Contains(l, want) {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// An open fleet tail ends with the session that opened it: nothing stored
// after a sign-out or after the operator is disabled reaches it.
func TestFleetTailEndsWithSession(t *testing.T) {
	for _, how := range []string{"sign-out", "operator disabled"} {
		t.Run(how, func(t *testing.T) {
			c := startCentral(t, sqldb.SQLite, nil)
			cl := c.client(t)
			if res, _ := cl.signIn(c.op.Token); res.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign-in: %d", res.StatusCode)
			}
			lines := openTail(t, c, cl)
			if !waitLine(lines, ": connected", 10*time.Second) {
				t.Fatal("tail did not connect")
			}
			c.edge(t, "edge-before", "job-before-session-end")
			if !waitLine(lines, "job-before-session-end", 10*time.Second) {
				t.Fatal("the tail did not deliver an event while the session was live")
			}
			switch how {
			case "sign-out":
				_, page := cl.get("/ui/")
				if res, _ := cl.post("/ui/signout", url.Values{"csrf": {csrf(t, page)}}); res.StatusCode != http.StatusSeeOther {
					t.Fatalf("sign-out: %d", res.StatusCode)
				}
			case "operator disabled":
				if err := c.deps.Operators.Disable(context.Background(), c.op.OperatorID); err != nil {
					t.Fatal(err)
				}
			}
			c.edge(t, "edge-after", "job-after-session-end")
			if waitLine(lines, "job-after-session-end", 5*time.Second) {
				t.Fatalf("after %s the open tail delivered an event stored later", how)
			}
			for range lines { // the stream has ended, not merely gone quiet
			}
		})
	}
}

// zeros is a body of n zero bytes.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n == 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n)
	clear(p[:k])
	z.n -= k
	return int(k), nil
}

// A console POST reads at most a small url-encoded form, before any check
// that needs it: no client, signed in or not, makes the server read or
// spool an upload.
func TestConsoleFormsAreBounded(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where multipart parsing would spool
	c := startCentral(t, sqldb.SQLite, nil)
	signedIn := c.client(t)
	if res, _ := signedIn.signIn(c.op.Token); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", res.StatusCode)
	}
	const big = 64 << 20
	cases := []struct {
		name, path, contentType string
		cl                      *client
		want                    int
	}{
		{"multipart upload to the sign-in form, no session", "/ui/signin", "multipart/form-data; boundary=b", c.client(t), http.StatusUnsupportedMediaType},
		{"oversized form to the sign-in form, no session", "/ui/signin", "application/x-www-form-urlencoded", c.client(t), http.StatusRequestEntityTooLarge},
		{"JSON body to a signed-in form", "/ui/transcode/redrive", "application/json", signedIn, http.StatusUnsupportedMediaType},
		{"oversized form, signed in", "/ui/transcode/redrive", "application/x-www-form-urlencoded", signedIn, http.StatusRequestEntityTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, c.base+tc.path, io.MultiReader(strings.NewReader("csrf=x&"), &zeros{big}))
			req.ContentLength = int64(len("csrf=x&")) + big
			req.Header.Set("Content-Type", tc.contentType)
			start := time.Now()
			res, err := tc.cl.http.Do(req)
			if err == nil { // the server may also cut the upload short
				res.Body.Close()
				if res.StatusCode != tc.want {
					t.Fatalf("status %d, want %d", res.StatusCode, tc.want)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("answered after %s: the body was read", d)
			}
			spooled, _ := filepath.Glob(filepath.Join(tmp, "multipart-*"))
			if len(spooled) > 0 {
				t.Fatalf("an upload was spooled to disk: %v", spooled)
			}
			if _, err := os.Stat(tmp); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A form of ordinary size still works.
	_, page := signedIn.get("/ui/")
	if res, _ := signedIn.post("/ui/signout", url.Values{"csrf": {csrf(t, page)}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", res.StatusCode)
	}
}

// A refused sign-in is logged with the peer's address, not the one a
// client claims in X-Forwarded-For.
func TestSigninRefusalLogsThePeer(t *testing.T) {
	c := startCentral(t, sqldb.SQLite, nil)
	cl := c.client(t)
	_, page := cl.get("/ui/signin")
	form := url.Values{"csrf": {csrf(t, page)}, "token": {"eop_guess"}}
	req, _ := http.NewRequest(http.MethodPost, c.base+"/ui/signin", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", "198.51.100.77")
	res, err := cl.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("sign-in: %d", res.StatusCode)
	}
	for _, l := range strings.Split(c.logs.String(), "\n") {
		if strings.Contains(l, "console sign-in refused") {
			if strings.Contains(l, "198.51.100.77") || !strings.Contains(l, `"remote":"127.0.0.1"`) {
				t.Fatalf("refused sign-in logged with the claimed address, not the peer 127.0.0.1:\n%s", l)
			}
			return
		}
	}
	t.Fatalf("no sign-in refusal logged:\n%s", c.logs.String())
}
