package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/console"
	"github.com/vesta-cx/euterpe/edge/library"
)

// The console is told a library with roots whose database is not open
// from one without roots, and why the open fails when that is known.
func TestPartsLibraryState(t *testing.T) {
	full := errors.New("disk full")
	notOpen := func() *library.Library { return nil }
	cases := []struct {
		name  string
		parts Parts
		want  console.LibraryState
	}{
		{"no roots", Parts{}, console.LibraryState{}},
		{"roots, reason not known", Parts{Library: notOpen}, console.LibraryState{Configured: true}},
		{"roots, reason known", Parts{Library: notOpen, LibraryErr: func() error { return full }},
			console.LibraryState{Configured: true, OpenErr: full}},
		{"no roots, an error is not shown", Parts{LibraryErr: func() error { return full }}, console.LibraryState{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, c.parts.libraryState())
		})
	}
}

// While the library database cannot be opened, the console's library page
// answers 503 and says so (not "the library is off"), and once the
// database opens the page is the library's again.
func TestConsoleLibraryPageWhileTheLibraryCannotBeOpened(t *testing.T) {
	_, opt := testsvc.Redis(t)
	state, card, root := t.TempDir(), filepath.Join(t.TempDir(), "card"), t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(card, "library.db"), filepath.Join(state, "library.db")))
	logs := &testsvc.LogBuffer{}
	addr := freeAddr(t)
	env := map[string]string{"EUTERPE_REDIS_URL": redisURLOf(opt), "EUTERPE_LIBRARY_ROOTS": root,
		"EUTERPE_EDGE_ADDR": addr, "EUTERPE_STATE_DIR": state, "EUTERPE_TASK_BACKENDS": "tool=exec:/bin/cat"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve"}, io.Discard, logs, envMap(env)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
	})
	base := "http://" + addr
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	stopped := false
	require.Eventually(t, func() bool {
		select {
		case code := <-done:
			done <- code
			stopped = true
			return true
		default:
		}
		code, _ := get("/healthz")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "%s", logs)
	require.False(t, stopped, "serve stopped:\n%s", logs)

	code, body := get("/ui/library")
	assert.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.Contains(t, body, "the library database cannot be opened")
	assert.Contains(t, body, "jobs run as usual; retrying")
	assert.Contains(t, body, "unable to open database file", "the page says why")
	assert.NotContains(t, body, "The media library is off")
	_, body = get("/ui/queue")
	assert.Contains(t, body, "the library database cannot be opened")
	assert.NotContains(t, body, "not configured")

	require.NoError(t, os.Mkdir(card, 0o700))
	require.Eventually(t, func() bool {
		code, _ := get("/ui/library")
		return code == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond, "%s", logs)
	_, body = get("/ui/library")
	assert.Contains(t, body, "Scan progress")
}
