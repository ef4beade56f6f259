package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type testSettings struct {
	addr   string
	n      int
	grace  time.Duration
	on     bool
	secret string
	redis  string
}

func newTestConfig(env map[string]string) (*Config, *testSettings) {
	s := &testSettings{}
	c := NewConfig("test", func(k string) string { return env[k] })
	c.String(&s.addr, "addr", "EUTERPE_ADDR", "127.0.0.1:8070", "listen address", CheckHostPort)
	c.Int(&s.n, "workers", "EUTERPE_WORKERS", 4, 1, 64, "workers")
	c.Duration(&s.grace, "grace", "EUTERPE_GRACE", 10*time.Second, 0, time.Minute, "grace")
	c.Bool(&s.on, "on", "EUTERPE_ON", false, "switch")
	c.String(&s.secret, "api-key", "EUTERPE_API_KEY", "", "key", func(v string) error {
		if v != "" && len(v) < 8 {
			return errors.New("too short")
		}
		return nil
	}, Secret())
	c.String(&s.redis, "redis-url", "EUTERPE_REDIS_URL", "redis://127.0.0.1:6379/0", "redis", CheckURL("redis", "rediss"))
	return c, s
}

func TestConfigPrecedence(t *testing.T) {
	c, s := newTestConfig(map[string]string{"EUTERPE_WORKERS": "8", "EUTERPE_GRACE": "3s"})
	require.NoError(t, c.Parse([]string{"-workers", "16", "serve"}))
	require.Equal(t, 16, s.n, "flag beats environment")
	require.Equal(t, 3*time.Second, s.grace, "environment beats default")
	require.Equal(t, "127.0.0.1:8070", s.addr, "default")
	require.Equal(t, []string{"serve"}, c.Args())
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		args    []string
		setting string
		hidden  string
	}{
		{"env not an int", map[string]string{"EUTERPE_WORKERS": "many"}, nil, "EUTERPE_WORKERS", ""},
		{"env out of range", map[string]string{"EUTERPE_WORKERS": "0"}, nil, "EUTERPE_WORKERS", ""},
		{"flag out of range", nil, []string{"-workers", "100"}, "-workers", ""},
		{"bad duration", map[string]string{"EUTERPE_GRACE": "soon"}, nil, "EUTERPE_GRACE", ""},
		{"bad bool", map[string]string{"EUTERPE_ON": "perhaps"}, nil, "EUTERPE_ON", ""},
		{"bad addr", map[string]string{"EUTERPE_ADDR": "localhost"}, nil, "EUTERPE_ADDR", ""},
		{"bad url scheme", map[string]string{"EUTERPE_REDIS_URL": "http://x"}, nil, "EUTERPE_REDIS_URL", ""},
		{"secret redacted", map[string]string{"EUTERPE_API_KEY": "abc"}, nil, "EUTERPE_API_KEY", "abc"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestConfig(tc.env)
			err := c.Parse(tc.args)
			var se *SettingError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.setting, se.Setting)
			require.NotContains(t, err.Error(), "\n", "one line")
			if tc.hidden != "" {
				require.NotContains(t, err.Error(), `"`+tc.hidden+`"`)
			}
		})
	}
}

func TestConfigSettingsListed(t *testing.T) {
	c, _ := newTestConfig(nil)
	var envs []string
	for _, s := range c.Settings() {
		envs = append(envs, s.Env)
	}
	require.Equal(t, "EUTERPE_ADDR,EUTERPE_API_KEY,EUTERPE_GRACE,EUTERPE_ON,EUTERPE_REDIS_URL,EUTERPE_WORKERS", strings.Join(envs, ","))
}

// Cross-setting checks run after every setting's own check, see final
// values (flag or environment), and stop Parse with a *SettingError.
func TestConfigCheckRelations(t *testing.T) {
	relation := func(s *testSettings) func() error {
		return func() error {
			if s.grace > 0 && s.n > int(s.grace/time.Second) {
				return &SettingError{Setting: "EUTERPE_WORKERS", Value: "x", Reason: "must not exceed EUTERPE_GRACE in seconds"}
			}
			return nil
		}
	}
	cases := []struct {
		name    string
		env     map[string]string
		args    []string
		check   func(s *testSettings) func() error
		setting string // "" = no error
	}{
		{"holds", map[string]string{"EUTERPE_WORKERS": "2", "EUTERPE_GRACE": "3s"}, nil, relation, ""},
		{"broken by env", map[string]string{"EUTERPE_WORKERS": "8", "EUTERPE_GRACE": "3s"}, nil, relation, "EUTERPE_WORKERS"},
		{"broken by flag", map[string]string{"EUTERPE_GRACE": "3s"}, []string{"-workers", "9"}, relation, "EUTERPE_WORKERS"},
		{"own check first", map[string]string{"EUTERPE_WORKERS": "0"}, nil, relation, "EUTERPE_WORKERS"},
		{"plain error", nil, nil, func(*testSettings) func() error {
			return func() error { return errors.New("inconsistent") }
		}, "settings"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s := newTestConfig(tc.env)
			c.Check(tc.check(s))
			err := c.Parse(tc.args)
			if tc.setting == "" {
				require.NoError(t, err)
				return
			}
			var se *SettingError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.setting, se.Setting)
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}
