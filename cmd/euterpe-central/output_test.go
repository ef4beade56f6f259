package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// A command whose output did not reach its file (a full disk under
// `keys generate > keyring`) fails, rather than exit 0 with the key lost.
func TestUnwrittenOutputFails(t *testing.T) {
	for _, args := range [][]string{{"keys", "generate"}, {"keys", "rewrap"}, {"version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			env := map[string]string{"EUTERPE_STATE_DIR": t.TempDir()}
			var errb bytes.Buffer
			code := run(context.Background(), args, func(k string) string { return env[k] }, failingWriter{}, &errb)
			if code != 1 || !strings.Contains(errb.String(), "no space left on device") {
				t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
			}
		})
	}
}
