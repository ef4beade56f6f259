package browsertest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

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
