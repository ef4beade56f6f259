package library

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/api"
)

// OpenBackoff paces the retries of an Opening's open: a full disk or a
// read-only state directory lasts until someone acts, so a minute between
// attempts is soon enough and keeps the log and the disk quiet.
var OpenBackoff = lease.Backoff{Base: time.Second, Cap: time.Minute}

// Opening is a library whose database may not be open yet. The library is
// secondary on an edge whose main work is the job gateway and workers: a
// database that cannot be opened at start (a full disk, a read-only state
// directory) must not stop those. Run retries the open with backoff and
// then runs the library; meanwhile its routes answer 503.
type Opening struct {
	log      *slog.Logger
	stateDir string
	workerID string
	s        Settings
	backoff  lease.Backoff
	firstErr error // why the open at NewOpening failed, logged by Run
	lib      atomic.Pointer[Library]
	lastErr  atomic.Pointer[error] // why the latest open failed, for the console
}

// NewOpening is New that does not fail when only the open fails: a
// setting error (*daemon.SettingError) is returned as New returns it, any
// other failure leaves the library to be opened by Run.
func NewOpening(ctx context.Context, log *slog.Logger, stateDir, workerID string, s Settings) (*Opening, error) {
	if log == nil {
		log = slog.Default()
	}
	o := &Opening{log: log, stateDir: stateDir, workerID: workerID, s: s, backoff: OpenBackoff}
	l, err := build(ctx, log, stateDir, workerID, s, true)
	var se *daemon.SettingError
	switch {
	case errors.As(err, &se):
		return nil, err
	case err != nil:
		o.firstErr = err
		o.lastErr.Store(&err)
	default:
		o.lib.Store(l)
	}
	return o, nil
}

// Err is why the database could not be opened at the latest attempt;
// nil once it is open (or before any attempt failed).
func (o *Opening) Err() error {
	if o.Library() != nil {
		return nil
	}
	if p := o.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Library is the open library, nil until its database opens.
func (o *Opening) Library() *Library { return o.lib.Load() }

// Mount adds the /api/v1 library routes; they answer 503
// library_unavailable until the database opens.
func (o *Opening) Mount(e *echo.Echo) {
	api.MountCurrent(e, func() *api.Handlers {
		if l := o.Library(); l != nil {
			return l.API
		}
		return nil
	})
}

// Checks reports the library database to /ready once it is open. Before,
// the check passes: /ready gates the job gateway, which runs without the
// library; the log and euterpe_edge_library_open say it is not open.
func (o *Opening) Checks() []daemon.Check {
	return []daemon.Check{{Name: "library", Probe: func(ctx context.Context) error {
		if l := o.Library(); l != nil {
			return l.Store.Ping(ctx)
		}
		return nil
	}}}
}

// Run opens the library if it is not open yet, retrying with backoff until
// it opens or ctx ends, then runs it until ctx ends (see Library.Run).
func (o *Opening) Run(ctx context.Context) error {
	if o.Library() == nil && !o.open(ctx) {
		return nil
	}
	return o.Library().Run(ctx)
}

// Close releases the database of a library that never ran.
func (o *Opening) Close() error {
	if l := o.Library(); l != nil {
		return l.Store.Close()
	}
	return nil
}

// open retries the open until it succeeds (true) or ctx ends. The failure
// is logged once: it lasts as long as the disk stays full.
func (o *Opening) open(ctx context.Context) bool {
	o.log.Error("cannot open the library database; jobs run as usual, the library's routes answer 503 until it opens; retrying with backoff",
		"err", daemon.CapMessage(o.firstErr.Error()))
	for failures := 1; ; failures++ {
		// Shutdown during the wait ends it: another attempt would touch
		// the state directory on the way out, maybe a card being unmounted.
		if !daemon.Sleep(ctx, o.backoff.Delay(failures)) {
			return false
		}
		l, err := build(ctx, o.log, o.stateDir, o.workerID, o.s, false)
		if err == nil {
			o.lib.Store(l)
			o.log.Info("the library database is open; the library runs")
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		o.lastErr.Store(&err)
		o.log.Debug("the library database still cannot be opened", "err", daemon.CapMessage(err.Error()))
	}
}
