package testsvc

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// mountNSEnv marks the child test process InMountNamespace starts.
const mountNSEnv = "EUTERPE_TEST_MOUNT_NS"

// InMountNamespace runs cases, which mount things, in a child process of
// the test binary that runs only the top-level test t, inside a private
// mount namespace (unshare --mount), so no mount it makes is visible
// outside. Mounting needs root and util-linux's unshare: without them t
// is skipped, or fails when CI=true (CI runs as root with util-linux, so
// there the cases must run). The child's output is logged.
func InMountNamespace(t *testing.T, cases func(t *testing.T)) {
	t.Helper()
	if os.Getenv(mountNSEnv) == "1" {
		cases(t)
		return
	}
	skip := t.Skip
	if os.Getenv("CI") == "true" {
		skip = t.Fatal
	}
	if os.Getuid() != 0 {
		skip("bind mounts need root (run as root to exercise them in a private mount namespace)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		skip("unshare (util-linux) not installed")
	}
	name := t.Name()
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", os.Args[0],
		"-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), mountNSEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child in a mount namespace: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) || strings.Contains(string(out), "SKIP") {
		t.Fatalf("child did not run the cases:\n%s", out)
	}
	t.Logf("%s", out)
}
