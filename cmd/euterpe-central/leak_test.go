package main

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// A start that fails on a secret setting — a database that is unreachable
// or refuses the login, a keyring that does not parse, a command line
// gone wrong — says so in one line (or a log line at debug level) that
// never holds the secret, in any of the forms it can be given.
func TestPlantedSecretNeverInStartFailures(t *testing.T) {
	const planted = "PLANTED-central-4b1d9e"
	key := credentials.NewKey() // key material is planted as itself
	refusing := "127.0.0.1:1"
	if u, err := url.Parse(testsvc.PostgresURL()); err == nil && u.Host != "" {
		refusing = u.Host // no such role there: the server refuses the login
	}
	db := func(host, query string) string {
		return "postgres://euterpe_no_such_role:" + planted + "@" + host + "/x?connect_timeout=2" + query
	}
	cases := []struct {
		name   string
		args   []string
		env    map[string]string
		secret string
	}{
		{"database unreachable", []string{"serve"}, map[string]string{"EUTERPE_DATABASE_URL": db("127.0.0.1:1", "")}, planted},
		{"database refuses the login", []string{"migrate"}, map[string]string{"EUTERPE_DATABASE_URL": db(refusing, "")}, planted},
		{"password parameter", []string{"serve"}, map[string]string{
			"EUTERPE_DATABASE_URL": "postgres://euterpe_no_such_role@" + refusing + "/x?connect_timeout=2&password=" + planted}, planted},
		{"database URL as a flag", []string{"migrate", "-database-url", db("127.0.0.1:1", "")}, nil, planted},
		{"database URL that does not parse", []string{"serve"}, map[string]string{"EUTERPE_DATABASE_URL": db("127.0.0.1:x", "")}, planted},
		{"keyring not base64", []string{"serve"}, map[string]string{"EUTERPE_KEYRING": "k1:" + planted}, planted},
		{"keyring written key first", []string{"serve"}, map[string]string{"EUTERPE_KEYRING": key + ":k1"}, key},
		{"keyring in a malformed flag", []string{"serve", "---keyring=k1:" + key}, nil, key},
		{"database URL as the command", []string{db("127.0.0.1:1", "")}, nil, planted},
		{"database URL as a stray argument", []string{"migrate", db("127.0.0.1:1", "")}, nil, planted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"EUTERPE_STATE_DIR": t.TempDir(), "EUTERPE_CENTRAL_ADDR": "127.0.0.1:0", "EUTERPE_LOG_LEVEL": "debug"}
			for k, v := range tc.env {
				env[k] = v
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a start that succeeds is stopped
			defer cancel()
			var out, errb bytes.Buffer
			code := run(ctx, tc.args, func(k string) string { return env[k] }, &out, &errb)
			if code == 0 {
				t.Fatalf("exit 0; stderr:\n%s", errb.String())
			}
			if strings.TrimSpace(errb.String()) == "" {
				t.Fatal("nothing said about the failure")
			}
			for name, s := range map[string]string{"stdout": out.String(), "stderr": errb.String()} {
				if strings.Contains(s, tc.secret) {
					t.Errorf("the secret is in %s:\n%s", name, s)
				}
			}
		})
	}
}

// The settings help shows defaults, never the values the environment
// holds.
func TestHelpShowsNoSecret(t *testing.T) {
	const planted = "PLANTED-central-help"
	env := map[string]string{
		"EUTERPE_DATABASE_URL": "postgres://u:" + planted + "@127.0.0.1:1/x",
		"EUTERPE_KEYRING":      "k1:" + planted,
	}
	for _, args := range [][]string{{"help"}, {"serve", "-h"}} {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errb)
		if code != 0 || !strings.Contains(out.String(), "EUTERPE_KEYRING") {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
		if strings.Contains(out.String()+errb.String(), planted) {
			t.Fatalf("%v: the secret is in the help:\n%s", args, out.String())
		}
	}
}
