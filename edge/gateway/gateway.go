package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Gateway serves the /v1/jobs API. Mount adds its routes; Run owns the
// event hub and must run for SSE to deliver anything.
type Gateway struct {
	log   *slog.Logger
	set   Settings
	store *jobs.Store
	hub   *Hub

	backlog *backlogGauge
}

// New builds a gateway on the shared store; opt describes the Redis server,
// from which the hub opens its single dedicated connection.
func New(log *slog.Logger, set Settings, store *jobs.Store, opt *redis.Options) *Gateway {
	store.QueueMaxLen = int64(set.QueueMaxLen)
	hub := NewHub(log, opt, store.Redis())
	if set.readBlock != 0 {
		hub.block = set.readBlock
	}
	return &Gateway{log: log, set: set, store: store, hub: hub, backlog: &backlogGauge{every: set.BacklogInterval}}
}

// Hub exposes the fan-out reader (for metrics and tests).
func (g *Gateway) Hub() *Hub { return g.hub }

// Mount adds the /v1/jobs routes to e.
func (g *Gateway) Mount(e *echo.Echo) {
	v1 := e.Group("/v1/jobs")
	v1.POST("", g.createJob)
	v1.GET("/:id", g.getJob)
	v1.POST("/:id/cancel", g.cancelJob)
	v1.GET("/:id/events", g.streamEvents)
}

// Run creates the worker group if missing (retrying while Redis is down)
// and runs the event hub until ctx is done. It returns once every
// goroutine it started has ended; requests still served afterwards (the
// HTTP server's shutdown grace) start none.
func (g *Gateway) Run(ctx context.Context) error {
	groupCtx, stopGroup := context.WithCancel(ctx)
	grouped := make(chan struct{})
	go func() {
		defer close(grouped)
		g.ensureGroup(groupCtx)
	}()
	err := g.hub.Run(ctx)
	stopGroup() // the hub may fail before ctx is done
	g.backlog.stop()
	<-grouped
	return err
}

func (g *Gateway) ensureGroup(ctx context.Context) {
	for {
		err := g.store.EnsureGroup(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		g.log.Warn("cannot create worker group yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}
