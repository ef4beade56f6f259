package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/uuid"
)

var (
	bootOnce sync.Once
	bootID   string
)

// BootID is a UUID minted once per process start. A restarted process gets a
// new one, so a worker that died and came back never mistakes the leases of
// its previous life for its own.
func BootID() string {
	bootOnce.Do(func() { bootID = uuid.NewString() })
	return bootID
}

// WorkerID returns the identity leases are taken under: POD_NAME, then
// HOSTNAME, then the boot UUID (Euterpe contract §2).
func WorkerID(getenv func(string) string) string {
	for _, k := range []string{"POD_NAME", "HOSTNAME"} {
		if v := getenv(k); v != "" {
			return v
		}
	}
	return BootID()
}

// IdentityFile is the file in the state directory holding the identity
// PersistentWorkerID minted on the first start.
const IdentityFile = "worker-id"

// PersistentWorkerID is WorkerID for a daemon whose identity must survive
// restarts (the edge: its Redis consumer name). POD_NAME, then HOSTNAME,
// as WorkerID; without either (systemd sets neither) the identity kept in
// stateDir/IdentityFile, created on the first start as "<hostname>-<8 hex>"
// so two daemons on one host with their own state directories differ.
// A restarted daemon then keeps its consumer instead of adding one more
// to the group on every start.
func PersistentWorkerID(getenv func(string) string, stateDir string) (string, error) {
	for _, k := range []string{"POD_NAME", "HOSTNAME"} {
		if v := getenv(k); v != "" {
			return v, nil
		}
	}
	path := filepath.Join(stateDir, IdentityFile)
	if id, err := readIdentity(path); !errors.Is(err, fs.ErrNotExist) {
		return id, err
	}
	if err := os.MkdirAll(stateDir, 0o750); err != nil {
		return "", fmt.Errorf("worker identity: %w", err)
	}
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r > ' ' && r < 0x7f {
			return r
		}
		return -1
	}, host)
	if host == "" {
		host = "edge"
	}
	id := host + "-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	// Written aside then linked into place: a crash leaves no half-written
	// file, and of two daemons starting at once on one state directory the
	// second finds the first one's identity instead of replacing it.
	tmp, err := os.CreateTemp(stateDir, IdentityFile+".*")
	if err != nil {
		return "", fmt.Errorf("worker identity: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(id + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if errors.Is(err, fs.ErrExist) {
		return readIdentity(path)
	}
	if err != nil {
		return "", fmt.Errorf("worker identity: %w", err)
	}
	if d, err := os.Open(stateDir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return id, nil
}

// readIdentity reads an identity file; one that is empty or holds anything
// but one line of printable ASCII is an error naming the file, rather than
// silently becoming a new identity.
func readIdentity(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	ok := id != "" && len(id) <= 200
	for _, r := range id {
		if r <= ' ' || r >= 0x7f {
			ok = false
		}
	}
	if !ok {
		return "", fmt.Errorf("worker identity file %s is corrupt (want one line of printable ASCII); remove it to mint a new identity", path)
	}
	return id, nil
}
