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
			return library.New(ctx, d.Log, d.StateDir, d.WorkerID, s)
		},
	})
}
