package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A WriteTimeout would cut Server-Sent Event streams (they stay open for
// minutes), so the daemons' HTTP server must not have one.
func TestHTTPServerHasNoWriteTimeout(t *testing.T) {
	if d := NewHTTPServer(nil).WriteTimeout; d != 0 {
		t.Fatalf("WriteTimeout = %v, want 0 (SSE streams)", d)
	}
}

// What net/http logs itself goes to slog's default logger: in the
// daemons, a JSON line at warn, not plain text on the standard log.
func TestHTTPServerErrorLogIsTheDefaultLogger(t *testing.T) {
	saved, flags := slog.Default(), log.Flags()
	t.Cleanup(func() {
		slog.SetDefault(saved)
		log.SetOutput(os.Stderr)
		log.SetFlags(flags)
	})
	var logs syncBuffer
	lg, err := NewLogger(&logs, "info")
	require.NoError(t, err)
	slog.SetDefault(lg)

	srv := NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		w.WriteHeader(http.StatusOK) // net/http complains: superfluous
	}))
	ln, err := Listen("EUTERPE_TEST_ADDR", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeUntil(ctx, srv, ln, 5*time.Second) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	require.NoError(t, err)
	resp.Body.Close()
	cancel()
	require.NoError(t, <-served)

	var rec map[string]any
	line := strings.TrimSpace(logs.String())
	require.NoError(t, json.Unmarshal([]byte(line), &rec), "not one JSON line: %q", line)
	require.Equal(t, "WARN", rec["level"])
	require.Contains(t, rec["msg"], "superfluous response.WriteHeader")
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
