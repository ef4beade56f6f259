package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckEnvExample(t *testing.T) {
	c, _ := newTestConfig(nil)
	cases := []struct {
		name, text, errHas string
	}{
		{"defaults", "# comment\n#EUTERPE_WORKERS=4\n#EUTERPE_GRACE=10s\n\n#EUTERPE_REDIS_URL=redis://127.0.0.1:6379/0\n", ""},
		{"secret as file", "#EUTERPE_API_KEY_FILE=/etc/euterpe/api_key\n", ""},
		{"set value", "EUTERPE_WORKERS=8\n", ""},
		{"unknown", "#EUTERPE_WORKER=4\n", "line 1: EUTERPE_WORKER is not a setting"},
		{"stale default", "\n#EUTERPE_WORKERS=5\n", `line 2: EUTERPE_WORKERS shows "5", the default is "4"`},
		{"secret value", "#EUTERPE_API_KEY=abcdefghij\n", "EUTERPE_API_KEY is secret"},
		{"_FILE of a non-secret", "#EUTERPE_WORKERS_FILE=/x\n", "EUTERPE_WORKERS_FILE is not a setting"},
		// systemd's EnvironmentFile= keeps an inline comment in the value.
		{"inline comment", "EUTERPE_API_KEY_FILE=/etc/euterpe/api_key   # mode 0600\n", "line 1: EUTERPE_API_KEY_FILE: systemd keeps"},
		{"inline comment on a tab", "EUTERPE_WORKERS=8\t# more\n", "line 1: EUTERPE_WORKERS: systemd keeps"},
		{"hash inside a value", "EUTERPE_REDIS_URL=redis://127.0.0.1:6379/0#x\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckEnvExample(tc.text, c.Settings())
			if tc.errHas == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.errHas)
		})
	}
}
