package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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

// A flag the command line gets wrong stops Parse with a one-line error
// naming it; the values of secret flags on the same line, in either form
// (-k v, -k=v, --k v), never appear in it, and the message stays within
// MaxMessage however long the command line is.
func TestConfigFlagErrorsKeepSecrets(t *testing.T) {
	const secret = "s3cret-on-the-command-line"
	const urlPassword = "hunter2hunter2"
	long := strings.Repeat("x", 2*MaxMessage)
	cases := []struct {
		name    string
		args    []string
		setting string
		has     string
	}{
		{"unknown flag after a secret", []string{"-api-key", secret, "-bogus"}, "flags", "-bogus"},
		{"unknown flag after -k=v", []string{"-api-key=" + secret, "-bogus", "1"}, "flags", "-bogus"},
		{"unknown flag after --k v", []string{"--api-key", secret, "--bogus"}, "flags", "-bogus"},
		{"bad int after a secret", []string{"-api-key", secret, "-workers", "many"}, "-workers", "not an integer"},
		{"bad duration after a secret", []string{"--api-key=" + secret, "-grace", "soon"}, "-grace", "not a duration"},
		{"bad bool", []string{"-on=perhaps", "-api-key", secret}, "-on", "not a boolean"},
		{"missing value after a secret", []string{"-api-key", secret, "-workers"}, "flags", "-workers"},
		{"password in a URL flag", []string{"-redis-url", "redis://:" + urlPassword + "@h:6379/0", "-bogus"}, "flags", "-bogus"},
		{"long command line", []string{"-api-key", secret, "-addr", long, "-bogus"}, "flags", "-bogus"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestConfig(nil)
			err := c.Parse(tc.args)
			var se *SettingError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.setting, se.Setting)
			msg := err.Error()
			require.NotContains(t, msg, secret)
			require.NotContains(t, msg, urlPassword)
			require.NotContains(t, msg, "\n", "one line")
			require.LessOrEqual(t, len(msg), MaxMessage)
			require.Contains(t, msg, tc.has)
		})
	}
}

// However long the value an operator gave, the error that names it stays
// within MaxMessage and still says what is wrong.
func TestSettingErrorCapped(t *testing.T) {
	long := strings.Repeat("a", 4*MaxMessage)
	cases := []struct {
		name   string
		env    map[string]string
		args   []string
		reason string
	}{
		{"long env value", map[string]string{"EUTERPE_ADDR": long}, nil, "want host:port"},
		{"long flag value", nil, []string{"-redis-url", "http://" + long}, "scheme must be"},
		{"long multibyte value", map[string]string{"EUTERPE_ADDR": strings.Repeat("é", 2*MaxMessage)}, nil, "want host:port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestConfig(tc.env)
			err := c.Parse(tc.args)
			var se *SettingError
			require.ErrorAs(t, err, &se)
			msg := err.Error()
			require.LessOrEqual(t, len(msg), MaxMessage)
			require.Contains(t, msg, tc.reason)
			require.True(t, utf8.ValidString(msg))
		})
	}
}

// An error about a value given as a flag quotes that value, as one about
// a variable does.
func TestFlagErrorQuotesTheValue(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"out of range", []string{"-workers", "100"}, `-workers="100"`},
		{"failed check", []string{"-redis-url", "http://x"}, `-redis-url="http://x"`},
		{"secret stays redacted", []string{"-api-key", "abc"}, `-api-key="[REDACTED]"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestConfig(nil)
			err := c.Parse(tc.args)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// A setting that is not secret as a whole may still hold a URL with a
// password (a backend list, a DSN); the error that quotes its refused value
// shows the URL without it, from a flag and from the environment alike.
func TestSettingErrorRedactsURLPassword(t *testing.T) {
	const urlPassword = "hunter2hunter2"
	bad := "http://user:" + urlPassword + "@h:6379/0"
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"flag", nil, []string{"-redis-url", bad}},
		{"environment", map[string]string{"EUTERPE_REDIS_URL": bad}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestConfig(tc.env)
			err := c.Parse(tc.args)
			var se *SettingError
			require.ErrorAs(t, err, &se)
			require.NotContains(t, err.Error(), urlPassword)
			require.Contains(t, err.Error(), "user:")
		})
	}
}

// A malformed flag (three dashes, "-=v") is refused by the flag package
// with the whole argument quoted; the value after its "=" may be a secret's
// and never reaches the message.
func TestMalformedFlagKeepsItsValue(t *testing.T) {
	const secret = "s3cret-in-a-malformed-flag"
	for _, args := range [][]string{
		{"---api-key=" + secret},
		{"-=" + secret},
		{"--=" + secret},
		{"---redis-url=redis://:" + secret + "@h:6379/0"},
	} {
		t.Run(args[0][:4], func(t *testing.T) {
			c, _ := newTestConfig(nil)
			err := c.Parse(args)
			var se *SettingError
			require.ErrorAs(t, err, &se)
			require.Equal(t, "flags", se.Setting)
			require.NotContains(t, err.Error(), secret)
			require.Contains(t, err.Error(), "bad flag syntax")
		})
	}
}

// A SettingError built by hand (a command name, a cross-setting check)
// quotes its value as given; a URL password in it is hidden all the same,
// also when the value is long enough to be cut.
func TestSettingErrorValueRedactsURLPassword(t *testing.T) {
	const pw = "hunter2-in-a-value"
	for _, v := range []string{
		"postgres://u:" + pw + "@db:5432/x",
		"postgres://u:" + strings.Repeat("p", maxSettingValue-20) + pw + "@db:5432/x",
		"postgres://u:1234/" + pw + "@db:5432/x", // read by a URL parser as port 1234
		"rag=http:http://h/rag?api_key=" + pw + ",summarize=llm",
	} {
		err := &SettingError{Setting: "command", Value: v, Reason: "unknown command"}
		require.NotContains(t, err.Error(), pw)
		require.NotContains(t, err.Error(), "pppp")
		require.Contains(t, err.Error(), "unknown command")
	}
}

// CheckURL wants a host: url.Parse also takes hostless text for a URL,
// which a client would fail on only when first used.
func TestCheckURLWantsAHost(t *testing.T) {
	check := CheckURL("http", "https")
	for _, tt := range []struct {
		v  string
		ok bool
	}{
		{"", true},
		{"http://127.0.0.1:8080", true},
		{"https://llm.example/v1", true},
		{"http://[::1]:8080/v1", true},
		{"http://", false},
		{"http:foo", false},
		{"http:/127.0.0.1:8080", false},
		{"http:///v1", false},
		{"http://:8080", false},
		{"ftp://h", false},
		{"127.0.0.1:8080", false},
	} {
		err := check(tt.v)
		require.Equal(t, tt.ok, err == nil, "%q: %v", tt.v, err)
	}
}

// A secret setting given as a flag is warned about at start, naming the
// flag and where the value belongs instead, never the value: a command
// line is readable by every local user. The same value from the
// environment, and a flag that is no secret, are not.
func TestWarnSecretFlags(t *testing.T) {
	const planted = "PLANTED-key-7f3a"
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		warned bool
	}{
		{"secret flag", nil, []string{"-api-key", planted}, true},
		{"secret flag, = form", nil, []string{"-api-key=" + planted}, true},
		{"secret from the environment", map[string]string{"EUTERPE_API_KEY": planted}, nil, false},
		{"flag that is no secret", nil, []string{"-workers", "8"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestConfig(tc.env)
			require.NoError(t, c.Parse(tc.args))
			var logs bytes.Buffer
			log, err := NewLogger(&logs, "info")
			require.NoError(t, err)
			c.WarnSecretFlags(log)
			if !tc.warned {
				require.Empty(t, logs.String())
				return
			}
			var rec map[string]any
			require.NoError(t, json.Unmarshal(logs.Bytes(), &rec), logs.String())
			require.Equal(t, "WARN", rec["level"])
			require.Equal(t, "-api-key", rec["flag"])
			for _, want := range []string{"/proc/<pid>/cmdline", "EUTERPE_API_KEY,", "EUTERPE_API_KEY_FILE", "euterpe_api_key"} {
				require.Contains(t, rec["msg"], want)
			}
			require.NotContains(t, logs.String(), planted)
		})
	}
}

// TestWarnMisspelledEnv: a variable a letter or two away from a setting is
// named with the setting it most likely means, never with its value;
// settings, their _FILE forms and variables of other programs are quiet.
func TestWarnMisspelledEnv(t *testing.T) {
	const planted = "PLANTED-value-93c1"
	for _, tc := range []struct {
		name, variable, meant string // meant "": no warning
	}{
		{"swapped letters", "EUTERPE_REDIS_ULR", "EUTERPE_REDIS_URL"},
		{"missing letter", "EUTERPE_WORKER", "EUTERPE_WORKERS"},
		{"one wrong letter", "EUTERPE_GRAVE", "EUTERPE_GRACE"},
		{"secret's file form misspelled", "EUTERPE_API_KEY_FLIE", "EUTERPE_API_KEY_FILE"},
		{"a setting", "EUTERPE_WORKERS", ""},
		{"a secret's file form", "EUTERPE_API_KEY_FILE", ""},
		{"another program's", "EUTERPE_CENTRAL_URL", ""},
		{"not ours at all", "PATH", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestConfig(nil)
			require.NoError(t, c.Parse(nil))
			var logs bytes.Buffer
			log, err := NewLogger(&logs, "info")
			require.NoError(t, err)
			c.WarnMisspelledEnv(log, []string{tc.variable + "=" + planted})
			if tc.meant == "" {
				require.Empty(t, logs.String())
				return
			}
			var rec map[string]any
			require.NoError(t, json.Unmarshal(logs.Bytes(), &rec), logs.String())
			require.Equal(t, "WARN", rec["level"])
			require.Equal(t, tc.variable, rec["variable"])
			require.Equal(t, tc.meant, rec["setting"])
			require.Contains(t, rec["msg"], "did you mean "+tc.meant)
			require.NotContains(t, logs.String(), planted)
		})
	}
}

// TestBoolFlagAlone: a boolean flag alone means true and takes a value
// after "="; "-on false" leaves "false" as an argument, refused with a
// hint at the "=" form.
func TestBoolFlagAlone(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
		hint bool // NoArgs refuses, naming the "=" form
	}{
		{[]string{"-on"}, true, false},
		{[]string{"-on=true"}, true, false},
		{[]string{"-on=false"}, false, false},
		{[]string{"-on", "false"}, true, true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, s := newTestConfig(map[string]string{"EUTERPE_ON": "false"})
			require.NoError(t, c.Parse(tc.args))
			require.Equal(t, tc.want, s.on)
			err := c.NoArgs()
			if !tc.hint {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, `a boolean flag takes its value after "="`)
		})
	}
	c, _ := newTestConfig(nil)
	var se *SettingError
	require.ErrorAs(t, c.Parse([]string{"-on=perhaps"}), &se)
	require.Equal(t, "-on", se.Setting)
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "abc", 0}, {"abc", "acb", 1}, {"abc", "ab", 1},
		{"abc", "xbc", 1}, {"abcd", "badc", 2}, {"kitten", "sitting", 3}, {"a", "abcdef", 3},
	} {
		require.Equal(t, tc.want, editDistance(tc.a, tc.b, 3), "%q %q", tc.a, tc.b)
		require.Equal(t, tc.want, editDistance(tc.b, tc.a, 3), "%q %q", tc.b, tc.a)
	}
}
