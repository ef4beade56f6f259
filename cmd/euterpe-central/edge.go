package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

// idHelp is the -id flag's help in every command that takes it.
const idHelp = "edge id (edge rotate-secret, edge disable, edge enable)"

// The edge registry commands: register prints the sync secret once, on
// stdout only; the log names edges by id, never their secrets.
func init() {
	var name, id string
	var overlap time.Duration
	registry := func(ctx context.Context, app *serve.App, s serve.Settings, getenv func(string) string, log *slog.Logger) (*ingest.Registry, func(), error) {
		d, closeFn, err := app.Open(ctx, s, log, getenv)
		if err != nil {
			return nil, nil, err
		}
		return ingest.NewRegistry(d.DB, d.Keys), closeFn, nil
	}
	needID := func() error {
		if strings.TrimSpace(id) == "" {
			return &daemon.SettingError{Setting: "-id", Value: id, Reason: "is required"}
		}
		return nil
	}
	commands["edge register"] = &command{
		flags: func(c *daemon.Config) { c.String(&name, "name", "", "", "edge name (edge register)", nil) },
		run: func(ctx context.Context, app *serve.App, s serve.Settings, getenv func(string) string, log *slog.Logger, stdout io.Writer) error {
			if strings.TrimSpace(name) == "" {
				return &daemon.SettingError{Setting: "-name", Value: name, Reason: "is required"}
			}
			r, closeFn, err := registry(ctx, app, s, getenv, log)
			if err != nil {
				return err
			}
			defer closeFn()
			reg, err := r.Register(ctx, name)
			if err != nil {
				return err
			}
			log.Info("edge registered", "edge_id", reg.EdgeID, "name", reg.Name)
			return json.NewEncoder(stdout).Encode(reg)
		},
	}
	commands["edge rotate-secret"] = &command{
		flags: func(c *daemon.Config) {
			c.String(&id, "id", "", "", idHelp, nil)
			c.Duration(&overlap, "overlap", "", 24*time.Hour, 0, 30*24*time.Hour, "how long the previous sync secret is still accepted")
		},
		run: func(ctx context.Context, app *serve.App, s serve.Settings, getenv func(string) string, log *slog.Logger, stdout io.Writer) error {
			if err := needID(); err != nil {
				return err
			}
			r, closeFn, err := registry(ctx, app, s, getenv, log)
			if err != nil {
				return err
			}
			defer closeFn()
			rot, err := r.RotateSecret(ctx, id, overlap)
			if err != nil {
				return err
			}
			log.Info("edge sync secret rotated", "edge_id", id, "version", rot.Version, "overlap_until", rot.OverlapUntil)
			return json.NewEncoder(stdout).Encode(map[string]any{
				"edge_id": rot.EdgeID, "sync_secret": rot.Secret, "sync_secret_version": rot.Version,
				"previous_secret_valid_until": rot.OverlapUntil.UTC().Format(time.RFC3339),
			})
		},
	}
	// disable refuses an edge's batches and heartbeats (403 edge_disabled);
	// enable undoes it: the edge's next batch and heartbeat, with its
	// current secret, are taken in again.
	for _, c := range []struct {
		name, status string
		act          func(*ingest.Registry, context.Context, string) error
	}{
		{"edge disable", "disabled", (*ingest.Registry).Disable},
		{"edge enable", "enabled", (*ingest.Registry).Enable},
	} {
		commands[c.name] = &command{
			flags: func(cfg *daemon.Config) { cfg.String(&id, "id", "", "", idHelp, nil) },
			run: func(ctx context.Context, app *serve.App, s serve.Settings, getenv func(string) string, log *slog.Logger, stdout io.Writer) error {
				if err := needID(); err != nil {
					return err
				}
				r, closeFn, err := registry(ctx, app, s, getenv, log)
				if err != nil {
					return err
				}
				defer closeFn()
				if err := c.act(r, ctx, id); err != nil {
					return err
				}
				log.Info("edge "+c.status, "edge_id", id)
				return json.NewEncoder(stdout).Encode(map[string]string{"edge_id": id, "status": c.status})
			},
		}
	}
}
