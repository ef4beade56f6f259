package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"

	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
)

func init() {
	var name, id string
	commands["operator create"] = &command{
		flags: func(c *daemon.Config) {
			c.String(&name, "name", "", "", "operator name (operator create)", nil)
		},
		run: func(ctx context.Context, app *serve.App, s serve.Settings, getenv func(string) string, log *slog.Logger, stdout io.Writer) error {
			if strings.TrimSpace(name) == "" {
				return &daemon.SettingError{Setting: "-name", Value: name, Reason: "is required"}
			}
			d, closeFn, err := app.Open(ctx, s, log, getenv)
			if err != nil {
				return err
			}
			defer closeFn()
			created, err := d.Operators.Create(ctx, name)
			if err != nil {
				return err
			}
			log.Info("operator created", "operator_id", created.OperatorID, "name", created.Name)
			return json.NewEncoder(stdout).Encode(created)
		},
	}
	commands["operator disable"] = &command{
		flags: func(c *daemon.Config) {
			c.String(&id, "id", "", "", "operator id (operator disable)", nil)
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
			if err := d.Operators.Disable(ctx, id); err != nil {
				return err
			}
			log.Info("operator disabled", "operator_id", id)
			return json.NewEncoder(stdout).Encode(map[string]string{"operator_id": id, "status": "disabled"})
		},
	}
}
