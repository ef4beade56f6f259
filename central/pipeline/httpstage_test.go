package pipeline

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An HTTP stage's status is judged before its body: a gateway's big error
// page under 502 is an unavailable stage like a bare 503, and so are 408
// and 429; other statuses without a contract error answer are refused for
// good; the size and shape of the answer are a 2xx's matter. The status is
// in the message. The server stands in for a user's HTTP stage.
func TestHTTPStatusBeforeBody(t *testing.T) {
	big := strings.Repeat("<p>bad gateway</p>", 5000) // > MaxAnswerBytes
	errAnswer := `{"error_code":"UPSTREAM_EMPTY","error_message":"none"}`
	cases := []struct {
		status int
		body   string
		ref    string
		code   string
	}{
		{200, `{"result_ref":"r"}`, "r", ""},
		{204, ``, "", CodeInvalidAnswer},
		{200, big, "", CodeInvalidAnswer},
		{200, `<html>`, "", CodeInvalidAnswer},
		{200, errAnswer, "", CodeUpstreamEmpty},
		{502, big, "", CodeStageUnavailable},
		{503, `<html>busy</html>`, "", CodeStageUnavailable},
		{500, `{"result_ref":"r"}`, "", CodeStageUnavailable},
		{504, ``, "", CodeStageUnavailable},
		{408, `Request Timeout`, "", CodeStageUnavailable},
		{429, big, "", CodeStageUnavailable},
		{503, errAnswer, "", CodeUpstreamEmpty},
		{429, errAnswer, "", CodeUpstreamEmpty},
		{422, `{"error_code":"TRANSFORM_INVALID","error_message":"bad"}`, "", CodeTransformInvalid},
		{404, `<html>not found</html>`, "", CodeInvalidAnswer},
		{400, big, "", CodeInvalidAnswer},
		{400, `{"result_ref":"r"}`, "", CodeInvalidAnswer},
		{401, ``, "", CodeInvalidAnswer},
	}
	for _, c := range cases {
		t.Run(strconv.Itoa(c.status)+" "+truncate(c.body, 24), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			ref, err := HTTP{URL: srv.URL, Timeout: 5 * time.Second}.Run(context.Background(), msg)
			if ref != c.ref || ErrorCode(err) != c.code {
				t.Fatalf("ref %q err %v; want %q %s", ref, err, c.ref, c.code)
			}
			if c.code == CodeStageUnavailable || c.code == CodeInvalidAnswer {
				if !strings.Contains(err.Error(), "status "+strconv.Itoa(c.status)) {
					t.Fatalf("message %q lacks the status", err)
				}
			}
		})
	}
}

// What an HTTP stage's messages say of its URL is the scheme, host and
// path: no password, no query (a function key, a signature), no token in
// the path, whatever went wrong. The messages are stored as error_message and logged.
func TestHTTPMessagesNameNoSecrets(t *testing.T) {
	secrets := []string{"hunter2", "FUNCKEY123", "SIG456", "APIKEY789", "TOK000", "PATHKEY0123456789"}
	const query = "?code=FUNCKEY123&sig=SIG456&key=APIKEY789&t=TOK000"
	withSecrets := func(base string) (raw, shown string) {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		return "http://svc:hunter2@" + u.Host + "/api/run/PATHKEY0123456789" + query, "http://" + u.Host + "/api/run/[REDACTED]"
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("mode") {
		case "slow":
			time.Sleep(2 * time.Second)
		case "404":
			w.WriteHeader(404)
		default:
			w.WriteHeader(503)
		}
	}))
	defer up.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	cases := []struct {
		name, base, mode string
		timeout          time.Duration
		code             string
	}{
		{"5xx", up.URL, "", 5 * time.Second, CodeStageUnavailable},
		{"4xx", up.URL, "404", 5 * time.Second, CodeInvalidAnswer},
		{"refused connection", down.URL, "", 5 * time.Second, CodeStageUnavailable},
		{"timeout", up.URL, "slow", 200 * time.Millisecond, CodeStageUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw, shown := withSecrets(c.base)
			if c.mode != "" {
				raw += "&mode=" + c.mode
			}
			_, err := HTTP{URL: raw, Timeout: c.timeout}.Run(context.Background(), msg)
			if ErrorCode(err) != c.code {
				t.Fatalf("%v; want %s", err, c.code)
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) {
					t.Fatalf("message %q holds %q", err, s)
				}
			}
			if !strings.Contains(err.Error(), shown) {
				t.Fatalf("message %q does not name %s", err, shown)
			}
		})
	}
	t.Run("unparsable", func(t *testing.T) {
		_, err := HTTP{URL: "http://svc:hunter2@host/\x7f" + query, Timeout: time.Second}.Run(context.Background(), msg)
		if ErrorCode(err) != CodeStageUnavailable {
			t.Fatalf("%v", err)
		}
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) {
				t.Fatalf("message %q holds %q", err, s)
			}
		}
	})
}
