package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// Central's secrets — the database URL and the keyring — reach the program
// as the packaged unit hands them over (credentials euterpe_database_url and
// euterpe_keyring) or as _FILE paths, never needing the environment; a
// world-readable file or a secret set twice stops the command with one
// line that names the setting and never the secret.
func TestSecretsFromCredentialsAndFiles(t *testing.T) {
	for _, engine := range sqltest.Engines {
		t.Run(string(engine), func(t *testing.T) {
			url := sqltest.URL(t, engine)
			keyring := "k1:" + credentials.NewKey()
			write := func(dir, name, value string, mode os.FileMode) string {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(value+"\n"), mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, mode); err != nil {
					t.Fatal(err)
				}
				return p
			}
			creds, files := t.TempDir(), t.TempDir()
			write(creds, "euterpe_database_url", url, 0o440)
			write(creds, "euterpe_keyring", keyring, 0o440)
			urlFile := write(files, "database_url", url, 0o600)
			keyFile := write(files, "keyring", keyring, 0o600)
			openKey := write(files, "keyring-0644", keyring, 0o644)

			cases := []struct {
				name   string
				env    map[string]string
				errHas string // "" = migrate succeeds
			}{
				{"credentials", map[string]string{"CREDENTIALS_DIRECTORY": creds}, ""},
				{"files", map[string]string{"EUTERPE_DATABASE_URL_FILE": urlFile, "EUTERPE_KEYRING_FILE": keyFile}, ""},
				{"world-readable file", map[string]string{"EUTERPE_DATABASE_URL_FILE": urlFile, "EUTERPE_KEYRING_FILE": openKey},
					`invalid setting EUTERPE_KEYRING_FILE="` + openKey + `"`},
				{"set twice", map[string]string{"CREDENTIALS_DIRECTORY": creds, "EUTERPE_DATABASE_URL": url},
					"EUTERPE_DATABASE_URL and EUTERPE_DATABASE_URL (credential euterpe_database_url)"},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					tc.env["EUTERPE_STATE_DIR"] = t.TempDir()
					var out, errb bytes.Buffer
					code := run(context.Background(), []string{"migrate"}, func(k string) string { return tc.env[k] }, &out, &errb)
					if tc.errHas == "" {
						if code != 0 {
							t.Fatalf("migrate: exit %d\n%s", code, errb.String())
						}
						db, err := sqldb.Open(context.Background(), url, "")
						if err != nil {
							t.Fatal(err)
						}
						defer db.Close()
						count(t, db, `SELECT COUNT(*) FROM inbox_jobs`)
						return
					}
					lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
					if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.errHas) {
						t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
					}
					if strings.Contains(errb.String(), keyring[3:]) || strings.Contains(errb.String(), url) {
						t.Fatalf("a secret reached the error:\n%s", errb.String())
					}
				})
			}
		})
	}
}
