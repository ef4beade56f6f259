package daemon

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

// A stream open when the server stops ends at once, so the stop does not
// wait out the grace for its client to leave; a plain request in flight
// keeps its context and finishes within the grace.
func TestStreamsEndAtShutdown(t *testing.T) {
	e := NewEcho(slog.New(slog.DiscardHandler))
	slowStarted := make(chan struct{})
	slowDone := make(chan error, 1)
	e.GET("/stream", func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderContentType, "text/event-stream")
		c.Response().WriteHeader(http.StatusOK)
		_, _ = c.Response().Write([]byte(": connected\n\n"))
		c.Response().Flush()
		<-c.Request().Context().Done()
		return nil
	})
	e.GET("/slow", func(c echo.Context) error {
		close(slowStarted)
		select {
		case <-time.After(500 * time.Millisecond):
			slowDone <- nil
			return c.String(http.StatusOK, "done")
		case <-c.Request().Context().Done():
			slowDone <- c.Request().Context().Err()
			return nil
		}
	})
	srv := NewHTTPServer(e)
	EndStreamsAtShutdown(e, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const grace = 20 * time.Second
	served := make(chan error, 1)
	go func() { served <- ServeUntil(ctx, srv, ln, grace) }()

	res, err := http.Get(base + "/stream")
	require.NoError(t, err)
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, ": connected\n", line)
	type answer struct {
		status int
		body   string
		err    error
	}
	slow := make(chan answer, 1)
	go func() {
		r, err := http.Get(base + "/slow")
		if err != nil {
			slow <- answer{err: err}
			return
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		slow <- answer{r.StatusCode, string(b), err}
	}()
	<-slowStarted

	began := time.Now()
	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(grace / 2):
		t.Fatal("the stop waited on the open stream")
	}
	require.Less(t, time.Since(began), 5*time.Second)
	_, err = io.ReadAll(res.Body)
	require.NoError(t, err, "the stream ends cleanly, not cut")
	require.NoError(t, <-slowDone, "a plain request keeps its context")
	a := <-slow
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, "done", a.body)
}
