package check

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// packaging/debversion.sh turns `git describe` into a Debian version that
// sorts in release order.
func TestDebVersion(t *testing.T) {
	cases := []struct{ describe, want string }{
		{"v1.4.0-0-gabc1234", "1.4.0"},
		{"v1.4.0-3-gabc1234", "1.4.0+git3.gabc1234"},
		{"v1.4.0-0-gabc1234-dirty", "1.4.0+dirty"},
		{"v1.4.0-3-gabc1234-dirty", "1.4.0+git3.gabc1234.dirty"},
		{"v1.5.0-rc1-0-gabc1234", "1.5.0~rc1"},
		{"v1.5.0-rc.2-4-gabc1234", "1.5.0~rc.2+git4.gabc1234"},
		{"", "0.0.0+git26.g3ba72ad"}, // no tag yet: COUNT and HASH below
	}
	for _, tc := range cases {
		cmd := exec.Command("../debversion.sh")
		cmd.Env = append(os.Environ(), "DESCRIBE="+tc.describe, "COUNT=26", "HASH=3ba72ad")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.describe, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%q → %q, want %q", tc.describe, got, tc.want)
		}
	}
	// Debian's own comparison agrees with the order releases are made in.
	order := []string{"0.0.0+git26.g3ba72ad", "0.0.0+git27.g0000000", "1.5.0~rc1", "1.5.0~rc1+git4.gabc1234", "1.5.0", "1.5.0+git1.gabc1234"}
	for i := 1; i < len(order); i++ {
		if err := exec.Command("dpkg", "--compare-versions", order[i-1], "lt", order[i]).Run(); err != nil {
			t.Errorf("dpkg does not sort %s before %s", order[i-1], order[i])
		}
	}
}
