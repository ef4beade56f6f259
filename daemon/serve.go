package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// SignalContext is cancelled on SIGTERM or SIGINT, the two ways systemd and a
// terminal ask a daemon to stop, and on SIGHUP alike: the daemons have no
// settings to reload, and a hang-up means the terminal they ran from is
// gone, on which the default action would kill them on the spot, dropping
// the in-flight work a stop lets finish. A daemon started with SIGHUP
// ignored (nohup) keeps ignoring it: catching it would undo what nohup
// asked for. Once the context is done SIGTERM and SIGINT take their
// default action again, so a second one ends a stop that hangs, as an
// operator pressing Ctrl-C twice expects; caught instead, it would be
// swallowed until the stop gave up by itself. SIGHUP is ignored from then
// on: a closing terminal often sends two.
func SignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	sigs := []os.Signal{syscall.SIGTERM, os.Interrupt}
	hup := !signal.Ignored(syscall.SIGHUP)
	if hup {
		sigs = append(sigs, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(parent, sigs...)
	context.AfterFunc(ctx, func() {
		if hup {
			signal.Ignore(syscall.SIGHUP)
		}
		stop()
	})
	return ctx, stop
}

// NewHTTPServer returns a server with header and idle timeouts but no
// WriteTimeout: a write deadline would cut Server-Sent Event streams that
// legitimately stay open for minutes. Handlers that must bound their own
// writes use http.ResponseController.
//
// What net/http logs itself (a failed accept, a panic it caught, a handler
// writing its header twice) goes to slog's default logger at warn, which
// both daemons make their JSON logger before they build the server: the
// standard log would write it as plain text, past the redaction.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
	}
}

// Listen binds addr, the value of setting, now, so "address in use" is
// reported, naming the setting, before the daemon tells systemd it is ready.
func Listen(setting, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		// The setting named first: "address already in use" alone does not
		// tell the operator which line of which file to change.
		return nil, fmt.Errorf("%s: listen %s: %w", setting, addr, err)
	}
	return ln, nil
}

// ErrRequestsCut is returned by ServeUntil when requests were still being
// answered when the shutdown grace ran out, and their connections were
// closed under them. The stop itself went as planned (the caller logs a
// warning and exits as usual); what it cut is no longer reported as a
// clean stop.
var ErrRequestsCut = errors.New("requests still in flight when the shutdown grace ran out were cut")

// ServeUntil serves on ln until ctx is cancelled, then shuts down, giving
// in-flight requests up to grace to finish before connections are closed
// (ErrRequestsCut).
func ServeUntil(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = errors.Join(ErrRequestsCut, srv.Close())
	}
	<-errc
	return err
}
