package library

import (
	"context"
	"errors"
	"log/slog"
	"sync"
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
	// rootsWarned is shared by every attempt at the open: the roots this
	// process cannot write are logged by the first that reaches them.
	rootsWarned sync.Once
	lib         atomic.Pointer[Library]
	lastErr     atomic.Pointer[error] // why the latest open failed, for the console
}

// NewOpening is New that does not fail when only the open fails: a
// setting error (*daemon.SettingError) is returned as New returns it, any
// other failure leaves the library to be opened by Run.
func NewOpening(ctx context.Context, log *slog.Logger, stateDir, workerID string, s Settings) (*Opening, error) {
	if log == nil {
		log = slog.Default()
	}
	o := &Opening{log: log, stateDir: stateDir, workerID: workerID, s: s, backoff: OpenBackoff}
	l, err := build(ctx, log, stateDir, workerID, s, &o.rootsWarned)
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

// Close closes the library's database. Call it once Run has returned (or
// never ran) and the HTTP server has finished its requests: Run leaves
// the database open for the requests still being answered at the stop.
func (o *Opening) Close() error {
	if l := o.Library(); l != nil {
		return l.Store.Close()
	}
	return nil
}

// open retries the open until it succeeds (true) or ctx ends. A failure is
// logged when its reason is new, at debug level while it repeats: a full
// disk lasts until someone acts, and the retries run every minute till
// then. A reason that changes is news to the operator (a full disk that
// became a permission problem, a setting that went wrong, or a fix that
// left another failure behind), so each change is logged once again.
func (o *Opening) open(ctx context.Context) bool {
	logged := daemon.CapMessage(o.firstErr.Error())
	o.log.Error("cannot open the library database; jobs run as usual, the library's routes answer 503 until it opens; retrying with backoff",
		"err", logged)
	for failures := 1; ; failures++ {
		// Shutdown during the wait ends it: another attempt would touch
		// the state directory on the way out, maybe a card being unmounted.
		if !daemon.Sleep(ctx, o.backoff.Delay(failures)) {
			return false
		}
		l, err := build(ctx, o.log, o.stateDir, o.workerID, o.s, &o.rootsWarned)
		if err == nil {
			o.lib.Store(l)
			o.log.Info("the library database is open; the library runs")
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		o.lastErr.Store(&err)
		msg := daemon.CapMessage(err.Error())
		var se *daemon.SettingError
		switch {
		case msg == logged:
			o.log.Debug("the library database still cannot be opened", "err", msg)
		case errors.As(err, &se):
			// Unlike at start, a setting that is refused only on a retry does
			// not stop the edge, and the open is still retried: what the
			// start did not refuse is a path setting that leads elsewhere
			// once the state directory exists or a card is mounted over part
			// of it or of a root (or unmounted), and the next mount or
			// unmount may set it right without a restart.
			o.log.Error("a library setting is wrong now; the library's routes answer 503 until it is right; retrying with backoff",
				"setting", se.Setting, "err", msg)
		default:
			o.log.Warn("the library database still cannot be opened, for another reason now; retrying with backoff", "err", msg)
		}
		logged = msg
	}
}
