package ship

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// heapChildEnv makes the test binary print its live heap right after
// start and exit: the memory that linking the shipper (and through
// sync/wire, central/webhook) costs every edge before it ships anything.
const heapChildEnv = "EUTERPE_SHIP_TEST_HEAP_CHILD"

func TestMain(m *testing.M) {
	if arg := os.Getenv(moveChildEnv); arg != "" {
		runMoveChild(arg)
	}
	if secret := os.Getenv(receiverChildEnv); secret != "" {
		runReceiverChild(secret)
		os.Exit(0)
	}
	if os.Getenv(heapChildEnv) == "1" {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Println(ms.HeapAlloc)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Linking the shipper must not cost the edge megabytes of heap at start
// (package-level state allocated by an init, such as a verifier's nonce
// store the edge never uses, is resident and scanned by every GC).
func TestLinkingTheShipperCostsLittleHeap(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), heapChildEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("child said %q", out)
	}
	if n > 4<<20 {
		t.Fatalf("live heap at start is %.1f MiB, want under 4 MiB", float64(n)/(1<<20))
	}
}
