package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

func init() {
	var eventIDs, jobID, since string
	commands["outbox redrive"] = &command{
		flags: func(c *daemon.Config) {
			c.String(&eventIDs, "event-id", "", "", fmt.Sprintf("comma-separated event ids to redrive (at most %d)", outbox.MaxRedriveEventIDs), checkQueryText)
			c.String(&jobID, "job-id", "", "", "redrive the dead-lettered events of this job", checkQueryText)
			c.String(&since, "since", "", "", "redrive events dead-lettered since an RFC 3339 time or a duration ago (e.g. 2h)", checkSince)
		},
		run: func(ctx context.Context, app *serve.App, s serve.Settings, getenv func(string) string, log *slog.Logger, stdout io.Writer) error {
			f := outbox.RedriveFilter{JobID: strings.TrimSpace(jobID)}
			for _, id := range strings.Split(eventIDs, ",") {
				if id = strings.TrimSpace(id); id != "" {
					f.EventIDs = append(f.EventIDs, id)
				}
			}
			if since != "" {
				f.Since, _ = parseSince(since, time.Now())
			}
			if len(f.EventIDs) == 0 && f.JobID == "" && f.Since.IsZero() {
				return &daemon.SettingError{Setting: "-event-id/-job-id/-since", Reason: "give at least one"}
			}
			if err := outbox.CheckRedriveEventIDs(f.EventIDs); err != nil {
				return &daemon.SettingError{Setting: "-event-id", Reason: err.Error()}
			}
			d, closeFn, err := app.Open(ctx, s, log, getenv)
			if err != nil {
				return err
			}
			defer closeFn()
			n, err := outbox.NewStore(d.DB, nil).Redrive(ctx, f)
			if err != nil {
				return err
			}
			log.Info("outbox events redriven", "count", n)
			_, err = fmt.Fprintf(stdout, "{\"redriven\":%d}\n", n)
			return err
		},
	}
}

// checkQueryText refuses a selector no query can take on both engines
// (bytes that are not UTF-8, or a NUL): Postgres would answer it with a
// driver error, SQLite with nothing redriven, and neither says what is
// wrong with the argument. Checked with the flags, before the database
// is opened. Text that passes stays text once split on commas.
func checkQueryText(v string) error {
	if !sqldb.IsText(v) {
		return errors.New("must be UTF-8 text without NUL")
	}
	return nil
}

func checkSince(v string) error {
	if v == "" {
		return nil
	}
	_, err := parseSince(v, time.Now())
	return err
}

// parseSince reads an RFC 3339 time or a duration before now.
func parseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, errors.New("want an RFC 3339 time (2025-01-02T15:04:05Z) or a duration (2h)")
}
