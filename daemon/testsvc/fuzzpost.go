package testsvc

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// PostNo5xx posts body to url with header and fails t when the answer is a
// 5xx: what the fuzz target of every HTTP body decoder asserts (bad input
// gets a 4xx, never a server error). It returns the error of sending, which
// the caller judges: the server being gone is a failure, a header value
// net/http itself refuses to carry is not an answer at all.
func PostNo5xx(t testing.TB, url string, header http.Header, body []byte) error {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode >= 500 {
		t.Fatalf("body %q (headers %v) answered %d: %s", body, header, res.StatusCode, raw)
	}
	return nil
}
