package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/pipeline/pipelinerole"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
)

// maxBackfillDays bounds one backfill.
const maxBackfillDays = 366

func init() {
	var typ, symbol, from, to string
	commands["pipeline backfill"] = &command{
		flags: func(c *daemon.Config) {
			c.String(&typ, "type", "", "", "pipeline job type (pipeline backfill)", nil)
			c.String(&symbol, "symbol", "", "", "symbol, e.g. an edge id for edge_daily (pipeline backfill)", nil)
			c.String(&from, "from", "", "", "first asof day, YYYY-MM-DD (pipeline backfill)", nil)
			c.String(&to, "to", "", "", "last asof day, YYYY-MM-DD, inclusive (pipeline backfill)", nil)
		},
		run: func(ctx context.Context, app *serve.App, s serve.Settings, getenv func(string) string, log *slog.Logger, stdout io.Writer) error {
			f, err := pipeline.ParseAsof(from)
			if err != nil {
				return &daemon.SettingError{Setting: "-from", Value: from, Reason: "want YYYY-MM-DD"}
			}
			l, err := pipeline.ParseAsof(to)
			if err != nil || l.Before(f) {
				return &daemon.SettingError{Setting: "-to", Value: to, Reason: "want YYYY-MM-DD, not before -from"}
			}
			if days := int(l.Sub(f).Hours()/24) + 1; days > maxBackfillDays {
				return &daemon.SettingError{Setting: "-to", Value: to, Reason: "a backfill covers at most 366 days"}
			}
			d, closeFn, err := app.Open(ctx, s, log, getenv)
			if err != nil {
				return err
			}
			defer closeFn()
			cfg := pipelinerole.Settings()
			types, err := pipelinerole.Types(ctx, cfg, d)
			if err != nil {
				return err
			}
			store := pipeline.NewStore(d.DB, nil)
			store.MaxAttempts, store.Types, store.Log = cfg.MaxAttempts, types, log
			// The API's rule, on the database's clock: a day that has not
			// started would store an empty report that stands for good.
			if err := pipeline.CheckDayStarted(to, store.Now()); err != nil {
				return &daemon.SettingError{Setting: "-to", Value: to, Reason: err.Error()}
			}
			enc := json.NewEncoder(stdout)
			for day := f; !day.After(l); day = day.AddDate(0, 0, 1) {
				asof := day.Format(pipeline.DateLayout)
				c, err := store.Submit(ctx, pipeline.Request{JobType: typ, Symbol: symbol, Asof: asof, RequestedBy: "backfill"})
				if err != nil {
					if code := pipeline.ErrorCode(err); code != "" {
						return &daemon.SettingError{Setting: "-type/-symbol", Value: typ + " " + symbol, Reason: err.Error()}
					}
					return err
				}
				if err := enc.Encode(struct {
					Asof string `json:"asof"`
					pipeline.Created
				}{asof, c}); err != nil {
					return err
				}
			}
			return nil
		},
	}
	var accessKey string
	// pipeline storage-credentials seals the S3 keys of
	// EUTERPE_PIPELINE_STORAGE with the keyring; the secret comes on stdin
	// so it is never in argv or the environment.
	commands["pipeline storage-credentials"] = &command{
		flags: func(c *daemon.Config) {
			c.String(&accessKey, "access-key-id", "", "", "S3 access key id for EUTERPE_PIPELINE_STORAGE (pipeline storage-credentials; the secret key is read from stdin)", nil)
		},
		run: func(ctx context.Context, app *serve.App, s serve.Settings, getenv func(string) string, log *slog.Logger, stdout io.Writer) error {
			if strings.TrimSpace(accessKey) == "" {
				return &daemon.SettingError{Setting: "-access-key-id", Value: accessKey, Reason: "is required"}
			}
			secret, err := bufio.NewReader(io.LimitReader(os.Stdin, 4096)).ReadString('\n')
			secret = strings.TrimRight(secret, "\r\n")
			if (err != nil && err != io.EOF) || secret == "" {
				return &daemon.SettingError{Setting: "stdin", Value: "[REDACTED]", Reason: "the S3 secret access key must be given on stdin"}
			}
			d, closeFn, err := app.Open(ctx, s, log, getenv)
			if err != nil {
				return err
			}
			defer closeFn()
			if err := pipeline.SaveSecret(ctx, d.DB, d.Keys, pipeline.StorageSecret, strings.TrimSpace(accessKey), secret); err != nil {
				return err
			}
			log.Info("pipeline storage credentials sealed", "access_key_id", strings.TrimSpace(accessKey), "kek_id", d.Keys.ActiveID())
			return json.NewEncoder(stdout).Encode(map[string]string{"access_key_id": strings.TrimSpace(accessKey), "kek_id": d.Keys.ActiveID()})
		},
	}
}
