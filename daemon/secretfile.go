package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrSecretFileMode is matched when a secret file is open to group or
// other users.
var ErrSecretFileMode = errors.New("secret file is accessible by group or others")

// ReadSecretFile reads a secret from path, refusing (as ssh refuses a
// private key) a file that group or other users may read or write, a file
// that is not regular, and an empty one. Trailing whitespace (the newline
// an editor adds) is trimmed. The error names the file and its mode, never
// its content.
func ReadSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat() // the opened file itself: no swap between check and read
	if err != nil {
		return nil, fmt.Errorf("secret file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secret file %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secret file %s has mode %04o: %w; run chmod 600 %s", path, perm, ErrSecretFileMode, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("secret file %s: %w", path, err)
	}
	b = bytes.TrimRight(b, " \t\r\n")
	if len(b) == 0 {
		return nil, fmt.Errorf("secret file %s is empty", path)
	}
	return b, nil
}
