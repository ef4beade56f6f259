package daemon

import (
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
