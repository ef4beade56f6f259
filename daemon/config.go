package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SettingError names the setting that stopped the daemon from starting. Its
// message is a single line meant to be the last thing an operator reads.
type SettingError struct {
	Setting string // environment variable or flag, as the operator wrote it
	Value   string // already redacted for secret settings
	Reason  string
}

func (e *SettingError) Error() string {
	// Whoever built the error, a URL password in the value (a command
	// line's stray word, a list of backends) is hidden, before the cut:
	// cut first, a password straddling it would lose the "@" that marks it.
	v := RedactURL(e.Value)
	// The value only helps the operator find the line to fix; cut short,
	// it leaves room for the reason within MaxMessage.
	if len(v) > maxSettingValue {
		v = CapMessage(v[:maxSettingValue]) + "…"
	}
	return CapMessage(fmt.Sprintf("invalid setting %s=%q: %s", e.Setting, v, RedactURL(e.Reason)))
}

const maxSettingValue = 200

// Setting describes one configurable value; Settings() returns them so the
// README table and `--help` come from the same source.
type Setting struct {
	Flag    string
	Env     string
	Default string
	Usage   string
	Secret  bool
}

// Config binds settings to flags and EUTERPE_* variables. The precedence is
// flag, then environment, then default, the same as most twelve-factor
// daemons; validation runs on the final value whatever its source.
type Config struct {
	fs       *flag.FlagSet
	getenv   func(string) string
	settings []*binding
	checks   []func() error
	// flagErr is the error of the last flag whose value was refused: the
	// flag package flattens it into a string that repeats the value even
	// for a secret setting.
	flagErr error
}

type binding struct {
	Setting
	set      func(string) error
	validate func() error
	fromFlag bool
	// flagValue is what the flag was given: a flag.Func has no String of
	// its own to quote in errors.
	flagValue string
	// source names where an environment-side value came from when it is
	// not the plain variable (EUTERPE_X_FILE, a credential), for errors.
	source string
}

// NewConfig returns a Config for a command. getenv is usually os.Getenv;
// tests pass a map lookup.
func NewConfig(name string, getenv func(string) string) *Config {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &Config{fs: fs, getenv: getenv}
}

// FlagSet exposes the underlying flags, for commands that add positional
// handling of their own.
func (c *Config) FlagSet() *flag.FlagSet { return c.fs }

// Option adjusts a setting declaration.
type Option func(*binding)

// Secret keeps the value out of error messages and logs, and lets the
// value come from a file instead of the environment: <ENV>_FILE names a
// file (mode 0600 or stricter) whose trimmed content is the value, and
// under systemd's LoadCredential= the credential named CredentialName(env)
// in $CREDENTIALS_DIRECTORY is read. Setting more than one of the variable,
// the file and the credential is an error; a flag still wins over all.
func Secret() Option { return func(b *binding) { b.Secret = true } }

func (c *Config) add(s Setting, set func(string) error, validate func() error, opts ...Option) {
	c.addFlag(s, set, validate, false, opts...)
}

// addFlag declares the setting; a boolean one's flag may stand alone
// (-console for -console=true), as Go's own boolean flags do.
func (c *Config) addFlag(s Setting, set func(string) error, validate func() error, isBool bool, opts ...Option) {
	b := &binding{Setting: s, set: set, validate: validate}
	for _, o := range opts {
		o(b)
	}
	c.settings = append(c.settings, b)
	c.fs.Var(&flagValue{c: c, b: b, isBool: isBool}, s.Flag, s.Usage+envNote(s.Env))
}

// flagValue is a setting's flag.Value.
type flagValue struct {
	c      *Config
	b      *binding
	isBool bool
}

func (f *flagValue) String() string   { return "" } // the defaults are in Settings
func (f *flagValue) IsBoolFlag() bool { return f.isBool }

func (f *flagValue) Set(v string) error {
	f.b.fromFlag = true
	f.b.flagValue = v
	if err := f.b.set(v); err != nil {
		f.c.flagErr = f.c.settingErr(f.b, "-"+f.b.Flag, v, err)
		return f.c.flagErr
	}
	return nil
}

func envNote(env string) string {
	if env == "" {
		return ""
	}
	return " (env " + env + ")"
}

func (c *Config) settingErr(b *binding, name, value string, err error) error {
	if b.Secret {
		value = "[REDACTED]"
	}
	// A setting that is not secret as a whole can still hold a URL with a
	// password (a list of backends, say).
	return &SettingError{Setting: name, Value: RedactURL(value), Reason: RedactURL(err.Error())}
}

// String declares a string setting. check may be nil.
func (c *Config) String(p *string, flagName, env, def, usage string, check func(string) error, opts ...Option) {
	*p = def
	c.add(Setting{Flag: flagName, Env: env, Default: def, Usage: usage},
		func(v string) error { *p = v; return nil },
		func() error {
			if check == nil {
				return nil
			}
			return check(*p)
		}, opts...)
}

// Int declares an integer setting bounded to [min, max].
func (c *Config) Int(p *int, flagName, env string, def, min, max int, usage string) {
	*p = def
	c.add(Setting{Flag: flagName, Env: env, Default: strconv.Itoa(def), Usage: usage},
		func(v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return errors.New("not an integer")
			}
			*p = n
			return nil
		},
		func() error {
			if *p < min || *p > max {
				return fmt.Errorf("must be between %d and %d", min, max)
			}
			return nil
		})
}

// Duration declares a duration setting ("15s", "2m") bounded to [min, max].
func (c *Config) Duration(p *time.Duration, flagName, env string, def, min, max time.Duration, usage string) {
	*p = def
	c.add(Setting{Flag: flagName, Env: env, Default: def.String(), Usage: usage},
		func(v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return errors.New("not a duration (use e.g. 500ms, 15s, 2m)")
			}
			*p = d
			return nil
		},
		func() error {
			if *p < min || *p > max {
				return fmt.Errorf("must be between %s and %s", min, max)
			}
			return nil
		})
}

// Bool declares a boolean setting. Its flag alone means true; a value
// goes after "=" (-name=false), as for Go's own boolean flags.
func (c *Config) Bool(p *bool, flagName, env string, def bool, usage string) {
	*p = def
	c.addFlag(Setting{Flag: flagName, Env: env, Default: strconv.FormatBool(def), Usage: usage},
		func(v string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return errors.New("not a boolean (true or false)")
			}
			*p = b
			return nil
		}, nil, true)
}

// Parse applies environment values, then flags, then validates every
// setting, then runs the cross-setting checks added with Check. The first
// problem is returned as a *SettingError.
func (c *Config) Parse(args []string) error {
	for _, b := range c.settings {
		if b.Env == "" {
			continue
		}
		if b.Secret {
			src, err := c.secretSources(b)
			if err != nil {
				return err
			}
			if src == nil {
				continue
			}
			if err := b.set(src.value); err != nil {
				return c.settingErr(b, src.setting, src.value, err)
			}
			if src.path != "" {
				b.source = src.setting
			}
			continue
		}
		if v := c.getenv(b.Env); v != "" {
			if err := b.set(v); err != nil {
				return c.settingErr(b, b.Env, v, err)
			}
		}
	}
	c.flagErr = nil
	if err := c.fs.Parse(args); err != nil {
		if c.flagErr != nil {
			return c.flagErr
		}
		if errors.Is(err, flag.ErrHelp) {
			return flag.ErrHelp // -h or -help: the caller prints the settings
		}
		// Not the arguments themselves: among them may be the value of a
		// secret flag. The flag package's message names the flag at fault.
		return &SettingError{Setting: "flags", Reason: flagMessage(err)}
	}
	for _, b := range c.settings {
		if b.validate == nil {
			continue
		}
		if err := b.validate(); err != nil {
			name := b.Env
			if b.source != "" {
				name = b.source
			}
			if b.fromFlag || name == "" {
				name = "-" + b.Flag
			}
			return c.settingErr(b, name, c.current(b), err)
		}
	}
	for _, check := range c.checks {
		if err := check(); err != nil {
			var se *SettingError
			if errors.As(err, &se) {
				return se
			}
			return &SettingError{Setting: "settings", Reason: err.Error()}
		}
	}
	return nil
}

// flagMessage is the flag package's message for a command line it refused,
// less any value: all but one name the flag alone, but "bad flag syntax"
// (---name=value, -=value) quotes the whole argument, and the value may be
// a secret flag's.
func flagMessage(err error) string {
	const syntax = "bad flag syntax: "
	msg := err.Error()
	if arg, ok := strings.CutPrefix(msg, syntax); ok {
		if name, _, hasValue := strings.Cut(arg, "="); hasValue {
			return syntax + name + "=…"
		}
	}
	return msg
}

// Check adds a validation of relations between settings (one setting must
// be at least twice another, …), run by Parse after every setting passed its
// own check, so a command stops before touching disk or database. check
// should return a *SettingError naming the setting to change; any other
// error is reported as a *SettingError for "settings".
func (c *Config) Check(check func() error) { c.checks = append(c.checks, check) }

func (c *Config) current(b *binding) string {
	if b.fromFlag {
		return b.flagValue
	}
	if v := c.getenv(b.Env); v != "" {
		return v
	}
	return b.Default
}

// WarnSecretFlags logs a warning for each secret setting Parse took from
// the command line, naming the flag, never the value. A command line is
// readable by every local user in /proc/<pid>/cmdline (and shows in ps,
// shell history and systemctl status) however the process guards its
// memory: the variable, its _FILE or a credential keep the value private.
func (c *Config) WarnSecretFlags(log *slog.Logger) {
	for _, b := range c.settings {
		if !b.Secret || !b.fromFlag {
			continue
		}
		instead := "its environment variable, its _FILE or its credential"
		if b.Env != "" {
			instead = fmt.Sprintf("%s, %s_FILE or the credential %s", b.Env, b.Env, CredentialName(b.Env))
		}
		log.Warn(fmt.Sprintf("-%s holds a secret and was given on the command line, which every local user can read in /proc/<pid>/cmdline; use %s instead", b.Flag, instead),
			"flag", "-"+b.Flag)
	}
}

// Args returns the positional arguments left after Parse.
func (c *Config) Args() []string { return c.fs.Args() }

// NoArgs is the error for a command that takes no positional argument but
// was given one (nil when it was not). Parsing stops at the first one, so
// whatever flags follow it would otherwise be dropped without a word.
func (c *Config) NoArgs() error {
	args := c.fs.Args()
	if len(args) == 0 {
		return nil
	}
	reason := "unexpected argument; settings are flags (-name value) or EUTERPE_* variables, and flags go before any other word"
	if _, err := strconv.ParseBool(args[0]); err == nil {
		// Most likely "-console false": a boolean flag stands alone.
		reason += "; a boolean flag takes its value after \"=\" (-name=false)"
	}
	return &SettingError{Setting: "arguments", Value: RedactURL(args[0]), Reason: reason}
}

// Settings lists the declared settings sorted by environment name.
func (c *Config) Settings() []Setting {
	out := make([]Setting, 0, len(c.settings))
	for _, b := range c.settings {
		out = append(out, b.Setting)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Env < out[j].Env })
	return out
}

// Usage writes a settings table to w.
func (c *Config) Usage(w io.Writer) {
	for _, s := range c.Settings() {
		fmt.Fprintf(w, "  -%s  (%s, default %q)\n      %s\n", s.Flag, s.Env, s.Default, s.Usage)
	}
}

// CheckURL returns a validator accepting absolute URLs with one of schemes
// and a host. url.Parse takes "http://", "http:host" and "http:/host:80"
// for URLs too, with no host at all: a client given one fails only when
// first used, long after the start that should have refused it.
func CheckURL(schemes ...string) func(string) error {
	return func(v string) error {
		if v == "" {
			return nil
		}
		u, err := url.Parse(v)
		if err != nil || u.Scheme == "" || u.Opaque != "" || u.Hostname() == "" {
			return errors.New("not an absolute URL with a host (scheme://host[:port][/path])")
		}
		for _, s := range schemes {
			if u.Scheme == s {
				return nil
			}
		}
		return fmt.Errorf("scheme must be one of %s", strings.Join(schemes, ", "))
	}
}

// CheckAbsPath accepts absolute paths only: a relative state directory
// would follow whatever directory the daemon was started from.
func CheckAbsPath(v string) error {
	if !filepath.IsAbs(v) {
		return errors.New("must be an absolute path")
	}
	return nil
}

// CheckHostPort accepts "host:port" listen addresses.
func CheckHostPort(v string) error {
	i := strings.LastIndex(v, ":")
	if i < 0 {
		return errors.New("want host:port")
	}
	p, err := strconv.Atoi(v[i+1:])
	if err != nil || p < 0 || p > 65535 {
		return errors.New("port must be 0-65535")
	}
	return nil
}

// CheckOneOf accepts only the listed values.
func CheckOneOf(values ...string) func(string) error {
	return func(v string) error {
		for _, x := range values {
			if v == x {
				return nil
			}
		}
		return fmt.Errorf("must be one of %s", strings.Join(values, ", "))
	}
}

// WarnMisspelledEnv logs a warning for each EUTERPE_* variable of environ
// ("NAME=value" entries, as os.Environ gives them) that is no setting of
// this command but is one or two letters away from one, naming the setting
// it most likely means: a misspelled variable is otherwise ignored without
// a word, and the daemon runs on a default the operator meant to change.
// Variables further from every setting are left alone: they belong to
// another program (the other daemon, euterpectl, tests) sharing the
// environment. The value is never logged.
func (c *Config) WarnMisspelledEnv(log *slog.Logger, environ []string) {
	known := map[string]bool{}
	for _, b := range c.settings {
		if b.Env == "" {
			continue
		}
		known[b.Env] = true
		if b.Secret {
			known[b.Env+"_FILE"] = true
		}
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "EUTERPE_") || known[name] {
			continue
		}
		best, bestDist := "", 3
		for k := range known {
			if d := editDistance(name, k, 3); d < bestDist || d == bestDist && d < 3 && k < best {
				best, bestDist = k, d
			}
		}
		if best == "" {
			continue
		}
		log.Warn(fmt.Sprintf("%s is not a setting of %s and is ignored; did you mean %s?", name, c.fs.Name(), best),
			"variable", name, "setting", best)
	}
}

// editDistance is the optimal-string-alignment distance between a and b
// (insertions, deletions, substitutions and swaps of neighbours, each one
// step), or limit when it is limit or more.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], limit)
}
