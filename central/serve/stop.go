package serve

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"golang.org/x/sync/errgroup"
)

// Once the stop has begun, serve waits for the roles the longer of
// EUTERPE_SHUTDOWN_GRACE and roleWindDown, plus stopMargin: the api serves
// in-flight requests for the grace, but a runner's wind-down does not
// follow it (it hands its jobs back for up to 10 s and removes what it
// staged for up to 30 s, after up to 30 s undoing a promotion against a
// storage that does not answer). With the default grace that is 55 s,
// just within the unit's TimeoutStopSec (60 s): serve names a role that
// hangs and still closes the database before systemd kills it; a wind-down
// longer than that, against storage that answers nothing, leaves its
// staged objects behind either way, as a runner killed outright does
// (docs/transcode.md, "Staged objects"). (Variables: tests shorten them.)
var (
	roleWindDown = 50 * time.Second
	stopMargin   = 5 * time.Second
)

func stopDeadline(grace time.Duration) time.Duration {
	return max(grace, roleWindDown) + stopMargin
}

// dbCloseWait bounds closing the database at exit: closing waits for the
// connections in use, and a role that did not stop may hold one forever.
var dbCloseWait = 10 * time.Second

// liveRoles are the roles whose Run has not returned, by their index in
// the list serve runs.
type liveRoles struct {
	mu    sync.Mutex
	names map[int]string
}

func newLiveRoles(roles []Role) *liveRoles {
	l := &liveRoles{names: make(map[int]string, len(roles))}
	for i, r := range roles {
		l.names[i] = r.Name()
	}
	return l
}

func (l *liveRoles) stopped(i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.names, i)
}

func (l *liveRoles) list() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := slices.Sorted(maps.Values(l.names))
	return strings.Join(names, ",")
}

// waitRoles waits for g's roles to return, but once the stop has begun
// (gctx done: a signal, or a role that failed) no longer than within. A
// role still running then is named, and serve returns an error so the
// process exits, which ends it, rather than hang until systemd kills it
// or report a clean stop with work still running.
func waitRoles(gctx context.Context, g *errgroup.Group, live *liveRoles, log *slog.Logger, within time.Duration) error {
	// The goroutine outlives an abandoned wait; the channel has room for
	// its one result, so it never blocks.
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		return err
	case <-gctx.Done():
	}
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		names := live.list()
		log.Error("roles did not stop in time", "roles", names, "waited", within.String())
		return fmt.Errorf("role %s did not stop within %s of the shutdown", names, within)
	}
}

// closeDB closes db, waiting at most wait: a connection held by a role
// that never returned would otherwise keep the process from exiting. What
// is left open ends with the process (SQLite recovers its WAL at the next
// open, Postgres drops the connections).
func closeDB(log *slog.Logger, db *sqldb.DB, wait time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = db.Close()
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn("the database did not close in time; leaving it to the exit", "waited", wait.String())
	}
}
