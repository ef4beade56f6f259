package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A command line gone wrong — a misspelt command, a malformed flag — is
// refused with a line that names what was wrong, never the operator token,
// a webhook secret or a server password given on the same line.
func TestCommandLineErrorsHideTheToken(t *testing.T) {
	const token = "PLANTED-operator-token-2e6f"
	const password = "PLANTED-server-password"
	server := "http://ops:" + password + "@127.0.0.1:1"
	for _, tc := range []struct {
		name string
		args []string
		has  string
	}{
		{"misspelt command", []string{"edge", "list", "--token", token, "--server", server}, `"edge list"`},
		{"misspelt command, flag first", []string{"pipline", "--token=" + token}, `"pipline"`},
		{"token in a malformed flag", []string{"edges", "list", "---token=" + token}, "bad flag syntax: ---token="},
		{"server in a malformed flag", []string{"jobs", "get", "---server=" + server}, "bad flag syntax: ---server="},
		{"webhook secret in a malformed flag", []string{"webhook", "verify", "---secret=" + token}, "bad flag syntax: ---secret="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCtlCtx(context.Background(), map[string]string{}, tc.args...)
			assert.Equal(t, 2, code, errOut)
			assert.Contains(t, errOut, tc.has)
			for _, secret := range []string{token, password} {
				assert.NotContains(t, out+errOut, secret)
			}
			assert.False(t, strings.Contains(errOut, "PLANTED"), errOut)
		})
	}
}
