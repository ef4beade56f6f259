package daemon

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
)

// EndStreamsAtShutdown has the streams e answers (responses of type
// text/event-stream) end as soon as srv's Shutdown begins. Shutdown waits
// for every request to finish but cancels none, and a stream finishes only
// when its client leaves: without this, every stop with a client connected
// takes the whole grace, after which the connection is cut all the same.
// Only streams are ended (their handlers see the request's context done,
// and a client resumes with Last-Event-ID); any other request keeps its
// context and the grace to finish. Call it before srv serves.
func EndStreamsAtShutdown(e *echo.Echo, srv *http.Server) {
	st := &streams{live: map[*context.CancelFunc]struct{}{}}
	e.Use(st.track)
	srv.RegisterOnShutdown(st.endAll)
}

// streams holds the cancel functions of the streams being answered.
type streams struct {
	mu     sync.Mutex
	ending bool
	live   map[*context.CancelFunc]struct{}
}

func (st *streams) track(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		orig := c.Request()
		ctx, cancel := context.WithCancel(orig.Context())
		defer cancel()
		// The error handler runs once this returns, when ctx is cancelled
		// whatever happened: it must see the client's own context, or any
		// error wrapping context.Canceled would pass for a client that hung
		// up (a 499 logged at debug) instead of the failure it is.
		defer c.SetRequest(orig)
		c.SetRequest(orig.WithContext(ctx))
		// Whether it is a stream is known once the handler has chosen
		// its response type, just before the header goes out.
		c.Response().Before(func() {
			if strings.HasPrefix(c.Response().Header().Get(echo.HeaderContentType), "text/event-stream") {
				st.add(&cancel)
			}
		})
		defer st.remove(&cancel)
		return next(c)
	}
}

func (st *streams) add(cancel *context.CancelFunc) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ending {
		(*cancel)() // began while the server was shutting down
		return
	}
	st.live[cancel] = struct{}{}
}

func (st *streams) remove(cancel *context.CancelFunc) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.live, cancel)
}

func (st *streams) endAll() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ending = true
	for cancel := range st.live {
		(*cancel)()
	}
	clear(st.live)
}
