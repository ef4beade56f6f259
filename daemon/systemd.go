package daemon

import (
	"context"
	"log/slog"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// Notifier speaks the sd_notify protocol. Outside systemd (no NOTIFY_SOCKET)
// every call is a no-op, so the same binary runs under a terminal.
type Notifier struct {
	log *slog.Logger
}

// NewNotifier returns a Notifier that logs failed notifications to log.
func NewNotifier(log *slog.Logger) *Notifier { return &Notifier{log: log} }

func (n *Notifier) send(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		n.log.Warn("sd_notify failed", "state", state, "err", err)
	}
}

// Ready tells systemd the service is serving (Type=notify).
func (n *Notifier) Ready() { n.send(sd.SdNotifyReady) }

// Stopping tells systemd a graceful shutdown has begun.
func (n *Notifier) Stopping() { n.send(sd.SdNotifyStopping) }

// Watchdog pings WATCHDOG=1 at a third of WatchdogSec, but only while healthy
// returns nil: a daemon that has lost Redis should be restarted by systemd
// rather than kept alive by a timer. It returns when ctx is done.
func (n *Notifier) Watchdog(ctx context.Context, healthy func(context.Context) error) {
	interval, err := sd.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		return
	}
	WatchdogLoop(ctx, interval/3, healthy, func() { n.send(sd.SdNotifyWatchdog) }, n.log)
}

// WatchdogLoop calls ping every period while healthy passes. It is separate
// from Watchdog so the health gating can be tested without systemd.
func WatchdogLoop(ctx context.Context, period time.Duration, healthy func(context.Context) error, ping func(), log *slog.Logger) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cctx, cancel := context.WithTimeout(ctx, period)
			err := healthy(cctx)
			cancel()
			if err != nil {
				log.Warn("watchdog withheld: dependency unhealthy", "err", err)
				continue
			}
			ping()
		}
	}
}
