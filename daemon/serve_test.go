package daemon

import "testing"

// A WriteTimeout would cut Server-Sent Event streams (they stay open for
// minutes), so the daemons' HTTP server must not have one.
func TestHTTPServerHasNoWriteTimeout(t *testing.T) {
	if d := NewHTTPServer(nil).WriteTimeout; d != 0 {
		t.Fatalf("WriteTimeout = %v, want 0 (SSE streams)", d)
	}
}
