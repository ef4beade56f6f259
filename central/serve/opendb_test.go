package serve_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/serve"
)

// TestOpenNamesTheDatabaseSetting: a database that cannot be opened at
// start names the setting that chose it, so the operator knows which
// line of the unit or env file to check; a password in the URL is not
// repeated.
func TestOpenNamesTheDatabaseSetting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		s    serve.Settings
		want []string
	}{
		{"unreachable postgres", serve.Settings{DatabaseURL: "postgres://u:hunter2@" + closed + "/db?connect_timeout=3", StateDir: t.TempDir()},
			[]string{"database (EUTERPE_DATABASE_URL)", "connection refused"}},
		{"state directory is a file", serve.Settings{StateDir: notADir},
			[]string{"EUTERPE_STATE_DIR=" + notADir, "EUTERPE_DATABASE_URL is empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			_, _, err := serve.NewApp().Open(ctx, tc.s, log, func(string) string { return "" })
			if err == nil {
				t.Fatal("opened")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the password is repeated: %v", err)
			}
		})
	}
}
