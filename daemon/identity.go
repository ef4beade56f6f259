package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

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

// ErrIdentityNotKept is returned with an identity PersistentWorkerID could
// not keep in the state directory: it holds for this run only, and the next
// start takes another.
var ErrIdentityNotKept = errors.New("worker identity not kept")

// PersistentWorkerID is WorkerID for a daemon whose identity must survive
// restarts (the edge: its Redis consumer name). POD_NAME, then HOSTNAME,
// as WorkerID; without either (systemd sets neither) the identity kept in
// stateDir/IdentityFile, created on the first start as "<hostname>-<8 hex>"
// so two daemons on one host with their own state directories differ.
// A restarted daemon then keeps its consumer instead of adding one more
// to the group on every start.
//
// When that file does not exist and cannot be written (a full disk, a
// read-only state directory) the identity is minted for this run only and
// returned with an error wrapping ErrIdentityNotKept, for the caller to warn
// and go on: the jobs matter more than a stable name, and the consumer
// left behind by the next start is one a crashed daemon leaves too (its
// pending entries are claimed by the others, then it is removed as idle).
// A file that exists but cannot be read, or is damaged, is still an error.
// The caller names its setting (EUTERPE_STATE_DIR) in what it reports.
func PersistentWorkerID(getenv func(string) string, stateDir string) (string, error) {
	for _, k := range []string{"POD_NAME", "HOSTNAME"} {
		if v := getenv(k); v != "" {
			return v, nil
		}
	}
	path := filepath.Join(stateDir, IdentityFile)
	// ENOTDIR: the state directory is a file (a mount point's stand-in),
	// so there is no identity yet and none can be kept, as when it is
	// read-only.
	if id, err := readIdentity(path); !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return id, err
	}
	id := mintIdentity()
	notKept := func(err error) (string, error) {
		return id, fmt.Errorf("%w: %s: %w", ErrIdentityNotKept, path, err)
	}
	if err := os.MkdirAll(stateDir, 0o750); err != nil {
		return notKept(err)
	}
	// Linked into place, not renamed: of two daemons starting at once on
	// one state directory the second finds the first one's identity
	// instead of replacing it.
	err := PlaceFile(path, []byte(id+"\n"), os.Link)
	if errors.Is(err, fs.ErrExist) {
		return readIdentity(path)
	}
	if err != nil {
		return notKept(err)
	}
	return id, nil
}

// mintIdentity is "<hostname>-<8 hex>".
func mintIdentity() string {
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
	return host + "-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
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
