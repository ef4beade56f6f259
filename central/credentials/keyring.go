package credentials

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/vesta-cx/euterpe/daemon"
)

// KeySize is the length of every KEK and DEK: AES-256.
const KeySize = 32

// LocalKeyFile is the KEK file created in the state directory when no
// keyring is configured and the database is the embedded SQLite.
const LocalKeyFile = "central-kek"

// Keyring holds KEKs by id; Active seals new blobs.
type Keyring struct {
	keys    map[string][]byte
	active  string
	keyLike int // entries whose kek_id is itself a key
}

// KeyLikeIDs counts the entries whose kek_id is itself a key: readable,
// never sealing, to be rewrapped away from.
func (k *Keyring) KeyLikeIDs() int { return k.keyLike }

// ParseKeyring reads "id:BASE64KEY,id2:BASE64KEY" (standard or URL base64
// of 32 bytes). active names the sealing key; empty means the first listed.
// Error messages name ids, never key material.
func ParseKeyring(spec, active string) (*Keyring, error) {
	k := &Keyring{keys: map[string][]byte{}}
	var first string
	for n, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, enc, ok := strings.Cut(part, ":")
		id = strings.TrimSpace(id)
		if !ok || id == "" {
			return nil, errors.New("keyring entry must be kek_id:base64key")
		}
		// The kek_id is logged and stored beside every sealed value: a key
		// written where the name goes (KEY1:KEY2) would be kept in the
		// open. Such an entry is still read (an older build accepted it,
		// and what it sealed must stay openable until rewrapped), but it
		// may not seal (below), and KeyLikeIDs lets the caller warn.
		label := strconv.Quote(id)
		if isKey(id) {
			k.keyLike++
			label = fmt.Sprintf("in entry %d", n+1) // never the id: it is key material
		}
		key, err := decodeKey(strings.TrimSpace(enc))
		if err != nil {
			return nil, fmt.Errorf("keyring key %s: %w", label, err)
		}
		if _, dup := k.keys[id]; dup {
			return nil, fmt.Errorf("keyring key %s listed twice", label)
		}
		k.keys[id] = key
		if first == "" {
			first = id
		}
	}
	if len(k.keys) == 0 {
		return nil, errors.New("keyring is empty")
	}
	if active == "" {
		active = first
	}
	if isKey(active) {
		return nil, errors.New("the active (sealing) entry's kek_id is itself a key: write kek_id:base64key, the name " +
			"before the colon; to move off such an entry, add a named one, make it active and run `keys rewrap`")
	}
	if _, ok := k.keys[active]; !ok {
		return nil, fmt.Errorf("active key %q is not in the keyring", active)
	}
	k.active = active
	return k, nil
}

// isKey reports whether s reads as a key, and so must not be shown.
func isKey(s string) bool {
	_, err := decodeKey(s)
	return err == nil
}

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("key must be %d bytes, got %d", KeySize, len(b))
			}
			return b, nil
		}
	}
	return nil, errors.New("key is not base64")
}

// NewKey returns a random key in the base64 form ParseKeyring reads.
func NewKey() string {
	b := make([]byte, KeySize)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// LoadOrCreateLocal reads the keyring file in stateDir, creating it (mode
// 0600, one fresh key) when missing. created reports a new file.
func LoadOrCreateLocal(stateDir string) (k *Keyring, created bool, err error) {
	p := filepath.Join(stateDir, LocalKeyFile)
	// A key others can read seals nothing from them: refused like a loose
	// _FILE secret, before any credential is sealed or opened with it.
	b, err := daemon.ReadPrivateFile(p)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(stateDir, 0o750); err != nil {
			return nil, false, fmt.Errorf("local KEK: %w", err)
		}
		won, err := publishLocalKey(stateDir, p)
		if err != nil {
			return nil, false, fmt.Errorf("local KEK: %w", err)
		}
		k, _, err := LoadOrCreateLocal(stateDir)
		return k, won, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("local KEK file %s: %w", p, err)
	}
	k, err = ParseKeyring(b, "")
	if err != nil {
		return nil, false, fmt.Errorf("local KEK file %s: %w", p, err)
	}
	return k, false, nil
}

// publishLocalKey writes a fresh key to a temporary file (mode 0600), syncs
// it and links it to p, so p appears only whole: another process starting at
// the same time, or a restart after a crash mid-write, never reads an empty
// or partial keyring, and a key that may already seal secrets survives a
// power cut. It reports false when another process published p first.
func publishLocalKey(dir, p string) (bool, error) {
	f, err := os.CreateTemp(dir, "."+LocalKeyFile+"-*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	id := "local-" + strings.ToLower(randomID(6))
	_, werr := fmt.Fprintf(f, "%s:%s\n", id, NewKey())
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return false, werr
	}
	if err := os.Link(tmp, p); err != nil {
		if errors.Is(err, os.ErrExist) {
			return false, nil
		}
		return false, err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return true, nil
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ActiveID is the kek_id new blobs are sealed with.
func (k *Keyring) ActiveID() string { return k.active }

// IDs lists the kek_ids in the keyring, sorted.
func (k *Keyring) IDs() []string {
	out := make([]string, 0, len(k.keys))
	for id := range k.keys {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
