package daemon

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
)

var envLine = regexp.MustCompile(`^(#?)(EUTERPE_[A-Z0-9_]+)=(.*)$`)

// inlineComment is a "#" after blank space in a value: systemd's
// EnvironmentFile= has no inline comments and keeps it, blank and all, as
// part of the value.
var inlineComment = regexp.MustCompile(`[ \t]#`)

// CheckEnvExample checks an environment file shipped as an example (the
// packages' /etc/euterpe/*.env) against the settings a program declares:
// every EUTERPE_* line must name a setting, a commented-out line must show
// its default, and a secret may appear only as its <ENV>_FILE form, so the
// file an operator edits never drifts from the program and never invites a
// secret into it.
func CheckEnvExample(text string, settings []Setting) error {
	byEnv := make(map[string]Setting, len(settings))
	for _, s := range settings {
		byEnv[s.Env] = s
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		m := envLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		commented, name, value := m[1] == "#", m[2], m[3]
		if !commented && inlineComment.MatchString(value) {
			return fmt.Errorf("line %d: %s: systemd keeps an inline comment in the value; put the comment on a line of its own", n, name)
		}
		if base, ok := strings.CutSuffix(name, FileSuffix); ok {
			if s, known := byEnv[base]; known && s.Secret {
				continue
			}
		}
		s, ok := byEnv[name]
		switch {
		case !ok:
			return fmt.Errorf("line %d: %s is not a setting", n, name)
		case s.Secret && value != "" && value != s.Default:
			return fmt.Errorf("line %d: %s is secret: show %s%s or a credential instead of a value", n, name, name, FileSuffix)
		case commented && value != s.Default:
			return fmt.Errorf("line %d: %s shows %q, the default is %q", n, name, value, s.Default)
		}
	}
	return sc.Err()
}
