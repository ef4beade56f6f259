package main

import (
	"errors"
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
	env := map[string]string{"EUTERPE_REDIS_URL": redisURLOf(opt), "EUTERPE_LIBRARY_ROOTS": root,
		"EUTERPE_STATE_DIR": state, "EUTERPE_TASK_BACKENDS": "tool=exec:/bin/cat"}
	base, logs := serveHealthy(t, env)
	get := func(path string) (int, string) { return getPage(base + path) }

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
