package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

const childEnv = "EUTERPE_OUTBOX_TEST_CHILD"

// runChild is a dispatcher process the crash test kills with SIGKILL.
func runChild() int {
	ctx := context.Background()
	db, err := sqldb.Open(ctx, os.Getenv("EUTERPE_OUTBOX_TEST_DB"), "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	keys, err := credentials.ParseKeyring(os.Getenv("EUTERPE_OUTBOX_TEST_KEYS"), "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := testConfig()
	cfg.Timeout, cfg.LeaseTTL = 600*time.Millisecond, 1200*time.Millisecond
	d, err := New(cfg, Options{Store: NewStore(db, nil), Secrets: &RequesterSecrets{Requesters: requesters.New(db, keys)}, Worker: "child",
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_ = d.Run(ctx)
	return 0
}

func TestSIGKILLMidBatchLosesNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		var mu sync.Mutex
		block := true
		release := make(chan struct{})
		rc := newReceiver(t, func(_ int, _ *http.Request, _ []byte) int {
			mu.Lock()
			b := block
			mu.Unlock()
			if b {
				<-release // the child's requests hang until it is killed
			}
			return 200
		})
		var ids []string
		for i := range 30 {
			ids = append(ids, f.addEvent(t, "job_"+strconv.Itoa(i%10), int64(i/10+1), rc.URL))
		}
		dsn := dbURL(t, db)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", "EUTERPE_OUTBOX_TEST_DB="+dsn, "EUTERPE_OUTBOX_TEST_KEYS="+f.keySpec)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the child to be mid-batch", 15*time.Second, func() bool { return len(rc.receipts()) >= 5 })
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		mu.Lock()
		block = false
		mu.Unlock()
		close(release)

		// The child's leases (1.2 s) expire unrenewed; the survivor reclaims
		// them with new claim versions and sends the same event ids again.
		f.start(t, testConfig(), "survivor")
		for _, id := range ids {
			f.waitStatus(t, id, "delivered")
		}
		seen := map[string]int{}
		for _, r := range rc.receipts() {
			seen[r.Header.Get("X-Euterpe-Event-Id")]++
		}
		want := map[string]bool{}
		for _, id := range ids {
			want[id] = true
			if seen[id] == 0 {
				t.Fatalf("event %s never received", id)
			}
		}
		for id := range seen {
			if !want[id] {
				t.Fatalf("unknown event id %q received", id)
			}
		}
	})
}

func dbURL(t *testing.T, db *sqldb.DB) string {
	if db.Engine == sqldb.SQLite {
		return "sqlite:" + db.Path
	}
	var name string
	if err := db.QueryRowContext(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testsvc.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
