package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
)

// The README's excerpts of /etc/euterpe/edge.env are read by systemd as
// they are copied: every line sets a real setting, and none carries an
// inline comment, which systemd's EnvironmentFile= keeps in the value.
func TestReadmeEdgeEnvSnippets(t *testing.T) {
	text, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```sh\n(# /etc/euterpe/edge\\.env[^\n]*\n.*?)```").FindAllStringSubmatch(string(text), -1)
	require.NotEmpty(t, blocks, "no edge.env excerpt in README.md")
	cfg, _ := newServeConfig(func(string) string { return "" })
	known := map[string]bool{}
	for _, s := range cfg.Settings() {
		known[s.Env] = true
		if s.Secret {
			known[s.Env+daemon.FileSuffix] = true
		}
	}
	assign := regexp.MustCompile(`^(EUTERPE_[A-Z0-9_]+)=(.*)$`)
	for _, b := range blocks {
		for _, line := range strings.Split(b[1], "\n") {
			m := assign.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			assert.True(t, known[m[1]], "%s is not a setting", m[1])
			assert.NotRegexp(t, `\s#`, m[2], "systemd would read the comment into %s", m[1])
		}
	}
}
