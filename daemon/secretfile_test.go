package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The secret used throughout: long enough for the test setting's check.
const fileSecret = "s3cret-from-a-file"

// secretDir lays out the files a case refers to: name → mode and content.
// "fifo" makes a named pipe, "dir" a directory, "link:T" a symlink to T and
// "hard:T" a hard link to T.
type secretFile struct {
	name    string
	mode    os.FileMode
	content string
	kind    string
}

func layout(t *testing.T, dir string, files []secretFile) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		switch {
		case f.kind == "fifo":
			require.NoError(t, syscall.Mkfifo(p, 0o600))
		case f.kind == "dir":
			require.NoError(t, os.Mkdir(p, 0o700))
		case strings.HasPrefix(f.kind, "link:"):
			require.NoError(t, os.Symlink(filepath.Join(dir, strings.TrimPrefix(f.kind, "link:")), p))
		case strings.HasPrefix(f.kind, "hard:"):
			require.NoError(t, os.Link(filepath.Join(dir, strings.TrimPrefix(f.kind, "hard:")), p))
		default:
			require.NoError(t, os.WriteFile(p, []byte(f.content), 0o600))
			require.NoError(t, os.Chmod(p, f.mode)) // past the umask
		}
	}
}

// Every setting declared with Secret() reads EUTERPE_X, EUTERPE_X_FILE or
// the systemd credential euterpe_x, exactly one of them; errors name the
// setting and the path and never carry the content.
func TestSecretFromFile(t *testing.T) {
	cases := []struct {
		name  string
		files []secretFile
		env   map[string]string // "$D" in a value is the case's directory
		args  []string
		want  string // the value on success
		// on failure: the SettingError's setting and words its message has
		setting string
		errHas  []string
	}{
		{name: "plain variable", env: map[string]string{"EUTERPE_API_KEY": fileSecret}, want: fileSecret},
		{name: "file 0600, trimmed",
			files: []secretFile{{name: "key", mode: 0o600, content: "\n  " + fileSecret + "\n"}},
			env:   map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"}, want: fileSecret},
		{name: "file 0400", files: []secretFile{{name: "key", mode: 0o400, content: fileSecret}},
			env: map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"}, want: fileSecret},
		{name: "file readable by others",
			files:   []secretFile{{name: "key", mode: 0o644, content: fileSecret}},
			env:     map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"},
			setting: "EUTERPE_API_KEY_FILE", errHas: []string{"$D/key", "group or others", "0644"}},
		{name: "file readable by group",
			files:   []secretFile{{name: "key", mode: 0o640, content: fileSecret}},
			env:     map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"},
			setting: "EUTERPE_API_KEY_FILE", errHas: []string{"$D/key", "0640"}},
		{name: "file writable by others", files: []secretFile{{name: "key", mode: 0o602, content: fileSecret}},
			env: map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"}, setting: "EUTERPE_API_KEY_FILE", errHas: []string{"0602"}},
		{name: "plain and file both set",
			files:   []secretFile{{name: "key", mode: 0o600, content: fileSecret}},
			env:     map[string]string{"EUTERPE_API_KEY": "another-secret", "EUTERPE_API_KEY_FILE": "$D/key"},
			setting: "EUTERPE_API_KEY", errHas: []string{"EUTERPE_API_KEY and EUTERPE_API_KEY_FILE", "exactly one"}},
		{name: "missing file", env: map[string]string{"EUTERPE_API_KEY_FILE": "$D/nope"},
			setting: "EUTERPE_API_KEY_FILE", errHas: []string{"$D/nope", "does not exist"}},
		{name: "directory", files: []secretFile{{name: "key", kind: "dir"}},
			env: map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"}, setting: "EUTERPE_API_KEY_FILE", errHas: []string{"not a regular file"}},
		{name: "fifo does not hang", files: []secretFile{{name: "key", kind: "fifo"}},
			env: map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"}, setting: "EUTERPE_API_KEY_FILE", errHas: []string{"not a regular file"}},
		{name: "empty file", files: []secretFile{{name: "key", mode: 0o600, content: " \n"}},
			env: map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"}, setting: "EUTERPE_API_KEY_FILE", errHas: []string{"empty"}},
		{name: "oversized file", files: []secretFile{{name: "key", mode: 0o600, content: strings.Repeat("x", maxSecretFileBytes+1)}},
			env: map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"}, setting: "EUTERPE_API_KEY_FILE", errHas: []string{"larger than"}},
		// The mode checked is the target's: a 0777 symlink to a private
		// file is fine, a symlink or hard link to a public one is not.
		{name: "symlink to private file",
			files: []secretFile{{name: "real", mode: 0o600, content: fileSecret}, {name: "key", kind: "link:real"}},
			env:   map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"}, want: fileSecret},
		{name: "symlink to public file",
			files:   []secretFile{{name: "real", mode: 0o644, content: fileSecret}, {name: "key", kind: "link:real"}},
			env:     map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"},
			setting: "EUTERPE_API_KEY_FILE", errHas: []string{"0644"}},
		{name: "hard link to public file",
			files:   []secretFile{{name: "real", mode: 0o644, content: fileSecret}, {name: "key", kind: "hard:real"}},
			env:     map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"},
			setting: "EUTERPE_API_KEY_FILE", errHas: []string{"0644"}},
		{name: "value from file fails the setting's check",
			files:   []secretFile{{name: "key", mode: 0o600, content: "short"}},
			env:     map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"},
			setting: "EUTERPE_API_KEY_FILE", errHas: []string{"too short", "[REDACTED]"}},
		{name: "flag wins over file",
			files: []secretFile{{name: "key", mode: 0o600, content: fileSecret}},
			env:   map[string]string{"EUTERPE_API_KEY_FILE": "$D/key"},
			args:  []string{"-api-key", "from-the-flag"}, want: "from-the-flag"},
		// systemd's credentials: named after the variable in lower case,
		// trusted whatever their mode (systemd guards the directory).
		{name: "credential",
			files: []secretFile{{name: "creds/euterpe_api_key", mode: 0o444, content: fileSecret + "\n"}},
			env:   map[string]string{EnvCredentialsDirectory: "$D/creds"}, want: fileSecret},
		{name: "credential directory without this credential",
			files: []secretFile{{name: "creds/euterpe_other", mode: 0o400, content: "x"}},
			env:   map[string]string{EnvCredentialsDirectory: "$D/creds"}, want: ""},
		{name: "credential under the upper-case name is not read",
			files: []secretFile{{name: "creds/EUTERPE_API_KEY", mode: 0o400, content: fileSecret}},
			env:   map[string]string{EnvCredentialsDirectory: "$D/creds"}, want: ""},
		{name: "credential and plain both set",
			files:   []secretFile{{name: "creds/euterpe_api_key", mode: 0o400, content: fileSecret}},
			env:     map[string]string{EnvCredentialsDirectory: "$D/creds", "EUTERPE_API_KEY": "another-secret"},
			setting: "EUTERPE_API_KEY", errHas: []string{"EUTERPE_API_KEY and EUTERPE_API_KEY (credential euterpe_api_key)"}},
		{name: "credential and file both set",
			files: []secretFile{{name: "creds/euterpe_api_key", mode: 0o400, content: fileSecret},
				{name: "key", mode: 0o600, content: fileSecret}},
			env:     map[string]string{EnvCredentialsDirectory: "$D/creds", "EUTERPE_API_KEY_FILE": "$D/key"},
			setting: "EUTERPE_API_KEY", errHas: []string{"EUTERPE_API_KEY_FILE and EUTERPE_API_KEY (credential euterpe_api_key)"}},
		{name: "credential that is a directory",
			files:   []secretFile{{name: "creds/euterpe_api_key", kind: "dir"}},
			env:     map[string]string{EnvCredentialsDirectory: "$D/creds"},
			setting: "EUTERPE_API_KEY (credential euterpe_api_key)", errHas: []string{"$D/creds/euterpe_api_key", "not a regular file"}},
		{name: "file inside the credentials directory skips the mode check",
			files: []secretFile{{name: "creds/key", mode: 0o440, content: fileSecret}},
			env:   map[string]string{EnvCredentialsDirectory: "$D/creds", "EUTERPE_API_KEY_FILE": "$D/creds/key"}, want: fileSecret},
		{name: "file beside the credentials directory keeps the mode check",
			files:   []secretFile{{name: "creds/x", mode: 0o400, content: "x"}, {name: "creds2/key", mode: 0o440, content: fileSecret}},
			env:     map[string]string{EnvCredentialsDirectory: "$D/creds", "EUTERPE_API_KEY_FILE": "$D/creds/../creds2/key"},
			setting: "EUTERPE_API_KEY_FILE", errHas: []string{"0440"}},
		// Only secret settings take _FILE: a stray one is ignored rather
		// than read.
		{name: "non-secret setting ignores _FILE",
			files: []secretFile{{name: "n", mode: 0o600, content: "32"}},
			env:   map[string]string{"EUTERPE_WORKERS_FILE": "$D/n", "EUTERPE_API_KEY": fileSecret}, want: fileSecret},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			layout(t, dir, tc.files)
			env := map[string]string{}
			for k, v := range tc.env {
				env[k] = strings.ReplaceAll(v, "$D", dir)
			}
			c, s := newTestConfig(env)
			err := c.Parse(tc.args)
			if tc.setting == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, s.secret)
				require.Equal(t, 4, s.n, "EUTERPE_WORKERS_FILE is no source of EUTERPE_WORKERS")
				return
			}
			var se *SettingError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.setting, se.Setting)
			msg := err.Error()
			require.NotContains(t, msg, "\n", "one line")
			require.NotContains(t, msg, fileSecret, "the content never reaches an error")
			require.NotContains(t, msg, "another-secret")
			for _, w := range tc.errHas {
				require.Contains(t, msg, strings.ReplaceAll(w, "$D", dir))
			}
		})
	}
}

func TestCredentialName(t *testing.T) {
	require.Equal(t, "euterpe_keyring", CredentialName("EUTERPE_KEYRING"))
	require.Equal(t, "euterpe_database_url", CredentialName("EUTERPE_DATABASE_URL"))
}

func TestWithin(t *testing.T) {
	cases := []struct {
		dir, path string
		want      bool
	}{
		{"/run/credentials/x.service", "/run/credentials/x.service/k", true},
		{"/run/credentials/x.service/", "/run/credentials/x.service/a/../k", true},
		{"/run/credentials/x.service", "/run/credentials/x.service/../y.service/k", false},
		{"/run/credentials/x.service", "/run/credentials/x.service2/k", false},
		{"/run/credentials/x.service", "/run/credentials/x.service", true},
		{"", "/k", false},
		{"/run/c", "relative/k", false},
		{"/run/c", "/run/c/..k", true},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, within(tc.dir, tc.path), "%s in %s", tc.path, tc.dir)
	}
}
