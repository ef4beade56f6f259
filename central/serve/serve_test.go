package serve_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

func app() *serve.App {
	a := serve.NewApp()
	a.Register(serve.Definition{Name: "exec", Executes: true, DefaultOn: true,
		New: func(*serve.Deps) (serve.Role, error) { return nil, nil }})
	a.Register(serve.Definition{Name: "extra", New: func(*serve.Deps) (serve.Role, error) { return nil, nil }})
	return a
}

func TestRoleSelection(t *testing.T) {
	for _, tc := range []struct {
		env, want string
		bad       bool
	}{
		{"", "api,sweeper,exec", false},
		{"api", "api", false},
		{" api , extra,api", "api,extra", false},
		{"api,nope", "", true},
	} {
		a := app()
		var s serve.Settings
		cfg := daemon.NewConfig("t", func(k string) string {
			if k == "EUTERPE_CENTRAL_ROLES" {
				return tc.env
			}
			return ""
		})
		a.Bind(cfg, &s)
		err := cfg.Parse(nil)
		var se *daemon.SettingError
		if tc.bad {
			if !errors.As(err, &se) || se.Setting != "EUTERPE_CENTRAL_ROLES" || !strings.Contains(err.Error(), "nope") {
				t.Errorf("%q: %v", tc.env, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.env, err)
		}
		if got := strings.Join(a.Enabled(s), ","); got != tc.want {
			t.Errorf("%q: roles %s, want %s", tc.env, got, tc.want)
		}
	}
}

func TestOpenKeyring(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := serve.OpenKeyring(serve.Settings{}, sqldb.Postgres, log); !errors.Is(err, serve.ErrKeyringRequired) {
		t.Fatalf("postgres without keyring: %v", err)
	}
	k, err := serve.OpenKeyring(serve.Settings{StateDir: t.TempDir()}, sqldb.SQLite, log)
	if err != nil || !strings.HasPrefix(k.ActiveID(), "local-") {
		t.Fatalf("sqlite local KEK: %v", err)
	}
	_, err = serve.OpenKeyring(serve.Settings{Keyring: "k:bm90LWEta2V5"}, sqldb.Postgres, log)
	if err == nil || strings.Contains(err.Error(), "bm90LWEta2V5") {
		t.Fatalf("bad keyring: %v", err)
	}
}

// TestLocalKEKWarnsOnce: with the embedded database and no keyring, the
// first start creates the local KEK file and logs one warning; a restart
// reloads the same key and logs none.
func TestLocalKEKWarnsOnce(t *testing.T) {
	state := t.TempDir()
	s, err := parseSettings(map[string]string{"EUTERPE_STATE_DIR": state})
	if err != nil {
		t.Fatal(err)
	}
	const warning = `"level":"WARN","msg":"no EUTERPE_KEYRING configured`
	var ids []string
	for i, want := range []int{1, 0} {
		logs := &testsvc.LogBuffer{}
		log, err := daemon.NewLogger(logs, "debug")
		if err != nil {
			t.Fatal(err)
		}
		d, closeDB, err := serve.NewApp().Open(context.Background(), s, log, func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.Keys.ActiveID())
		closeDB()
		if got := strings.Count(logs.String(), warning); got != want {
			t.Fatalf("start %d: %d local-KEK warnings, want %d; log:\n%s", i+1, got, want, logs.String())
		}
		if want == 1 && !strings.Contains(logs.String(), filepath.Join(state, credentials.LocalKeyFile)) {
			t.Fatalf("the warning does not name the key file: %s", logs.String())
		}
	}
	if ids[0] != ids[1] || !strings.HasPrefix(ids[0], "local-") {
		t.Fatalf("local KEK ids %v: the restart did not reload the key", ids)
	}
}

// An entry written the wrong way round (key:id) puts the key where the
// parser expects an id, and the parser's message quotes ids: the key must
// still not reach the error, nor must a key cut short or a second key.
func TestKeyringErrorHidesKeyInIDPlace(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	key, other := credentials.NewKey(), credentials.NewKey()
	for _, tc := range []struct {
		name, spec string
		hidden     []string
	}{
		{"swapped", key + ":k1", []string{key}},
		{"swapped after a good entry", "k1:" + other + "," + key + ":k2", []string{key, other}},
		{"swapped twice", key + ":" + other + "," + key + ":" + other, []string{key, other}},
		{"half a key swapped", key[:24] + ":k1", []string{key[:24]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := serve.OpenKeyring(serve.Settings{Keyring: tc.spec}, sqldb.Postgres, log)
			var se *daemon.SettingError
			if !errors.As(err, &se) || se.Setting != "EUTERPE_KEYRING" {
				t.Fatalf("err = %v", err)
			}
			for _, h := range tc.hidden {
				if strings.Contains(err.Error(), h) {
					t.Fatalf("the error quotes key material: %v", err)
				}
			}
		})
	}
	// An id is still named: it is what the operator looks for.
	_, err := serve.OpenKeyring(serve.Settings{Keyring: "kek-20240101:bm90LWEta2V5"}, sqldb.Postgres, log)
	if err == nil || !strings.Contains(err.Error(), "kek-20240101") {
		t.Fatalf("bad key of a named id: %v", err)
	}
}
