package pipelinerole

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
)

// The pipeline's settings start at the contract's values (§3.2: a
// visibility timeout of 30 s, the dead-letter queue after 5 attempts) when
// neither a flag nor the environment names them, and the environment
// overrides them.
func TestDefaultsAreTheContracts(t *testing.T) {
	cases := []struct {
		name            string
		env             map[string]string
		wantVisibility  time.Duration
		wantMaxAttempts int
	}{
		{"nothing set", nil, 30 * time.Second, 5},
		{"environment", map[string]string{"EUTERPE_PIPELINE_VISIBILITY": "45s", "EUTERPE_PIPELINE_MAX_ATTEMPTS": "3"}, 45 * time.Second, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var cfg Config
			c := daemon.NewConfig("test", func(k string) string { return tc.env[k] })
			cfg.Bind(c)
			require.NoError(t, c.Parse(nil))
			require.Equal(t, tc.wantVisibility, cfg.Visibility)
			require.Equal(t, tc.wantMaxAttempts, cfg.MaxAttempts)
		})
	}
}
