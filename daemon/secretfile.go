package daemon

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// EnvCredentialsDirectory is set by systemd for a unit with LoadCredential=:
// the directory holding one file per credential, readable only by the
// unit's user.
const EnvCredentialsDirectory = "CREDENTIALS_DIRECTORY"

// FileSuffix turns a secret setting's variable into the one naming a file
// that holds its value: EUTERPE_KEYRING → EUTERPE_KEYRING_FILE.
const FileSuffix = "_FILE"

// maxSecretFileBytes bounds what a secret file may hold: keyrings and URLs
// are far smaller, and a wrong path (a log, a device) must not be read whole.
const maxSecretFileBytes = 64 << 10

// CredentialName is the systemd credential that may carry a secret
// setting's value: its environment variable in lower case, the convention of
// credential IDs (EUTERPE_KEYRING → euterpe_keyring). A unit with
// LoadCredential=euterpe:/etc/euterpe/central.credentials gets the file
// keyring of that directory as euterpe_keyring.
func CredentialName(env string) string { return strings.ToLower(env) }

// secretSource is where a secret setting's environment-side value came
// from, for the one-line error that names it.
type secretSource struct {
	setting string // EUTERPE_X, EUTERPE_X_FILE or "EUTERPE_X (credential euterpe_x)"
	path    string // "" for the plain variable
	value   string
}

// secretSources finds the value of a secret setting outside the flags: the
// plain variable, <ENV>_FILE, or a systemd credential named after the
// variable. More than one is an error, so a value left behind in an
// environment file cannot silently override (or be overridden by) the file
// the operator moved it to.
func (c *Config) secretSources(b *binding) (*secretSource, error) {
	var found []*secretSource
	if v := c.getenv(b.Env); v != "" {
		found = append(found, &secretSource{setting: b.Env, value: v})
	}
	credDir := c.getenv(EnvCredentialsDirectory)
	if p := c.getenv(b.Env + FileSuffix); p != "" {
		// A path into the unit's credentials (EUTERPE_X_FILE=%d/x) is
		// protected by systemd like the credential lookup below.
		v, err := readSecretFile(p, !within(credDir, p))
		if err != nil {
			return nil, &SettingError{Setting: b.Env + FileSuffix, Value: p, Reason: err.Error()}
		}
		found = append(found, &secretSource{setting: b.Env + FileSuffix, path: p, value: v})
	}
	if credDir != "" {
		name := CredentialName(b.Env)
		p := filepath.Join(credDir, name)
		setting := b.Env + " (credential " + name + ")"
		// systemd makes the directory readable by the unit's user only
		// and its copies are root-owned 0400 or 0440 with a private
		// group, so the mode check of _FILE does not apply.
		v, err := readSecretFile(p, false)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, &SettingError{Setting: setting, Value: p, Reason: err.Error()}
		default:
			found = append(found, &secretSource{setting: setting, path: p, value: v})
		}
	}
	switch len(found) {
	case 0:
		return nil, nil
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, s := range found {
		names[i] = s.setting
	}
	return nil, &SettingError{Setting: b.Env, Value: "[REDACTED]",
		Reason: "set by both " + strings.Join(names, " and ") + "; keep exactly one"}
}

// ReadPrivateFile returns the trimmed content of a secret file the daemon
// keeps itself (a key in its state directory), refusing one its group or
// others may access, like a _FILE setting. A missing file wraps
// os.ErrNotExist.
func ReadPrivateFile(path string) (string, error) { return readSecretFile(path, true) }

// readSecretFile returns the trimmed content of the regular file at path.
// With private set it refuses a file that its group or others may access,
// as ssh does with private keys: a secret moved out of the environment into
// a world-readable file gained nothing. Errors name the path, never the
// content.
func readSecretFile(path string, private bool) (string, error) {
	// O_NONBLOCK: a FIFO at the path must not hang the daemon's start; it
	// is refused below as not a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("cannot read secret file: %w", os.ErrNotExist)
		}
		if errors.Is(err, os.ErrPermission) {
			return "", errors.New("cannot read secret file: permission denied")
		}
		return "", errors.New("cannot read secret file")
	}
	defer f.Close()
	// Stat the open file, not the path: the mode checked is that of the
	// bytes read even if the path is swapped between the two.
	st, err := f.Stat()
	if err != nil {
		return "", errors.New("cannot stat secret file")
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	if private && st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("secret file is accessible by group or others (mode %04o); chmod 0600 it (owner: the daemon's user)", st.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	if err != nil {
		return "", errors.New("cannot read secret file")
	}
	if len(data) > maxSecretFileBytes {
		return "", fmt.Errorf("secret file is larger than %d bytes", maxSecretFileBytes)
	}
	v := strings.TrimSpace(string(data))
	if v == "" {
		return "", errors.New("secret file is empty")
	}
	return v, nil
}

// within reports whether path lies inside dir (both cleaned and absolute;
// dir "" contains nothing).
func within(dir, path string) bool {
	if dir == "" || !filepath.IsAbs(dir) || !filepath.IsAbs(path) {
		return false
	}
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
