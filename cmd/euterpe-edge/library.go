package main

import (
	"context"

	"github.com/vesta-cx/euterpe/edge/library"
)

func init() {
	var s library.Settings
	register(Plugin{
		Name:     "library",
		Settings: s.Register,
		Build: func(ctx context.Context, d Deps) (Component, error) {
			l, err := library.New(ctx, d.Log, d.StateDir, d.WorkerID, s)
			if err == nil && s.Roots != "" {
				d.Parts.Library = l // its counts go into the sync heartbeat
			}
			return l, err
		},
	})
}
