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
)

func init() {
	var id string
	var overlap time.Duration
	commands["requester rotate-secret"] = &command{
		flags: func(c *daemon.Config) {
			c.String(&id, "id", "", "", "requester id (requester rotate-secret)", nil)
			c.Duration(&overlap, "overlap", "", 24*time.Hour, 0, 30*24*time.Hour, "how long the previous webhook secret still signs")
		},
		run: func(ctx context.Context, app *serve.App, s serve.Settings, getenv func(string) string, log *slog.Logger, stdout io.Writer) error {
			if strings.TrimSpace(id) == "" {
				return &daemon.SettingError{Setting: "-id", Value: id, Reason: "is required"}
			}
			d, closeFn, err := app.Open(ctx, s, log, getenv)
			if err != nil {
				return err
			}
			defer closeFn()
			rot, err := d.Requesters.RotateSecret(ctx, id, overlap)
			if err != nil {
				return err
			}
			log.Info("webhook secret rotated", "requester_id", id, "version", rot.Version, "overlap_until", rot.OverlapUntil)
			return json.NewEncoder(stdout).Encode(map[string]any{
				"requester_id": rot.RequesterID, "webhook_secret": rot.Secret, "webhook_secret_version": rot.Version,
				"previous_secret_valid_until": rot.OverlapUntil.UTC().Format(time.RFC3339),
			})
		},
	}
}
