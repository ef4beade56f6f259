package storage_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/storage"
)

// echoS3 answers every request but HEAD (a stat, answered as an object of
// ten bytes) with status and a plain-text body quoting the request's
// credentials back, as a proxy or a debugging endpoint in front of the
// storage may, after pad bytes of filler. It records the signatures it was
// sent.
type echoS3 struct {
	status int
	pad    int
	mu     sync.Mutex
	sigs   []string
}

var signature = regexp.MustCompile(`Signature=([0-9a-f]{64})`)

func (e *echoS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	if m := signature.FindStringSubmatch(auth); m != nil {
		e.mu.Lock()
		e.sigs = append(e.sigs, m[1])
		e.mu.Unlock()
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Length", "10")
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte("refused " + r.Method + strings.Repeat(".", e.pad) +
		" X-Amz-Security-Token: " + r.Header.Get("X-Amz-Security-Token") + " Authorization: " + auth))
}

func (e *echoS3) signatures() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.sigs...)
}

// A storage server that answers an error with a body quoting the request
// (not S3's XML, so minio-go takes the body for the message) must not put
// the session token or a request signature in the error: it becomes the
// job's last_error, the log line and the webhook's error message.
func TestStorageErrorHidesEchoedCredentials(t *testing.T) {
	creds := storage.Credentials{AccessKeyID: "AKIAECHO", SecretAccessKey: "PLANTED-secret-key-91d3", SessionToken: "PLANTED-session-token-77af"}
	path := filepath.Join(t.TempDir(), "out.bin")
	if err := os.WriteFile(path, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	// minio-go cuts a message at 1024 bytes: this filler has the cut go
	// through the token, ten bytes in.
	cutPad := 1024 - len("refused DELETE X-Amz-Security-Token: ") - 10
	for _, tc := range []struct {
		name        string
		status, pad int
	}{
		{"bad request", http.StatusBadRequest, 0},
		{"unauthorized", http.StatusUnauthorized, 0},
		{"internal error", http.StatusInternalServerError, 0},
		{"token across the cut", http.StatusBadRequest, cutPad},
	} {
		echo := &echoS3{status: tc.status, pad: tc.pad}
		srv := httptest.NewServer(echo)
		b := storage.Bucket{Endpoint: srv.URL, Region: "us-east-1", Name: "bucket"}
		c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
		ctx := context.Background()
		ops := map[string]func() error{
			"fetch": func() error {
				_, err := c.Fetch(ctx, storage.Source{Bucket: b, Key: "in.wav"}, creds, &bytes.Buffer{}, 0)
				return err
			},
			"upload": func() error {
				_, err := c.Upload(ctx, b, "out/a.bin", path, "audio/ogg", creds)
				return err
			},
			"copy":   func() error { return c.Copy(ctx, b, "in.wav", "out/b.wav", creds) },
			"remove": func() error { return c.Remove(ctx, b, "out/a.bin", creds) },
		}
		for name, op := range ops {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				err := op()
				if err == nil {
					t.Fatal("no error")
				}
				msg := err.Error()
				if !strings.Contains(msg, "refused") {
					t.Fatalf("the server's answer is not in the error, which proves nothing: %s", msg)
				}
				for _, secret := range append([]string{creds.SecretAccessKey, creds.SessionToken}, echo.signatures()...) {
					if strings.Contains(msg, secret) {
						t.Fatalf("the error holds %q: %s", secret, msg)
					}
				}
				if tc.pad > 0 && strings.Contains(msg, creds.SessionToken[:8]) {
					t.Fatalf("the error holds the start of the token: %s", msg)
				}
			})
		}
		srv.Close()
	}
}
