package browsertest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The browser's TMPDIR is in its profile unless the profile's path is too
// long for the socket Chromium makes there.
func TestProfileTmp(t *testing.T) {
	for _, tc := range []struct {
		profile string
		wantOK  bool
	}{
		{"/tmp/euterpe-chromium-1234567890", true},
		{"/" + strings.Repeat("d", 40), true},
		{"/" + strings.Repeat("d", 80), false},
	} {
		dir, ok := profileTmp(tc.profile)
		assert.Equal(t, tc.profile+"/t", dir)
		assert.Equal(t, tc.wantOK, ok, tc.profile)
	}
}
