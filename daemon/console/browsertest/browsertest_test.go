package browsertest_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/console/browsertest"
)

// TestHelperNoBrowser is run as a child process by TestMissingChromium.
func TestHelperNoBrowser(t *testing.T) {
	if os.Getenv("BROWSERTEST_CHILD") != "1" {
		t.Skip("run by TestMissingChromium")
	}
	browsertest.New(t)
	t.Log("started a browser")
}

// TestMissingChromium: without a browser a test skips with the command
// that installs it, and fails under CI=true.
func TestMissingChromium(t *testing.T) {
	for _, tc := range []struct {
		ci       string
		wantFail bool
		want     string
	}{{"", false, "SKIP"}, {"true", true, "FAIL"}} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestHelperNoBrowser$", "-test.v")
		cmd.Env = append(os.Environ(), "BROWSERTEST_CHILD=1", browsertest.ChromiumEnv+"=/nonexistent/chromium", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		assert.Equal(t, tc.wantFail, err != nil, "CI=%q: %s", tc.ci, out)
		assert.Contains(t, string(out), tc.want)
		assert.Contains(t, string(out), "apt-get install chromium")
		assert.False(t, strings.Contains(string(out), "started a browser"))
	}
}

// TestScreenshotWritesAPNG: Screenshot saves the page as a PNG in
// EUTERPE_SCREENSHOT_DIR.
func TestScreenshotWritesAPNG(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><html><body><p>a page</p></body></html>`))
	}))
	defer srv.Close()
	t.Setenv("EUTERPE_SCREENSHOT_DIR", t.TempDir())
	b := browsertest.New(t)
	b.Open(srv.URL)
	p := b.Screenshot("a-page")
	png, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "not a PNG")
}

// TestNoChromiumTempDirLeft: Chromium's own org.chromium.Chromium.*
// directory, which a killed browser leaves in TMPDIR, is made inside the
// profile and goes with it when the browser is closed.
func TestNoChromiumTempDirLeft(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><html><body><p>a page</p></body></html>`))
	}))
	defer srv.Close()
	// A TMPDIR of the test's own, so no other process's directories are
	// in it, and short, as t.TempDir's is not, for the browser's socket.
	dir, err := os.MkdirTemp("", "bt")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	t.Setenv("TMPDIR", dir)
	t.Run("browser", func(t *testing.T) {
		b := browsertest.New(t)
		b.Open(srv.URL)
		used, err := filepath.Glob(filepath.Join(dir, "euterpe-chromium-*", "t", "org.chromium.Chromium.*"))
		require.NoError(t, err)
		assert.NotEmpty(t, used, "the browser did not use its profile's TMPDIR")
	})
	left, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	assert.Empty(t, left, "left in TMPDIR after the browser closed")
}
