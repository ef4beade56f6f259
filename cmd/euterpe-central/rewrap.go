package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

// rewrapFailure is one set of columns whose blobs did not all move: row ids
// only, never key material.
type rewrapFailure struct {
	Table   string   `json:"table"`
	Columns string   `json:"columns"`
	Count   int      `json:"count"`
	IDs     []string `json:"ids"`
}

// rewrapKeys moves job credentials, webhook secrets and edge secrets to the
// active KEK. A blob that does not open is no reason to stop: every other
// blob still moves, the ones left behind are printed and logged by row id,
// and the command fails at the end, so the old KEK is not dropped while it
// still holds something.
func rewrapKeys(ctx context.Context, d *serve.Deps, log *slog.Logger, stdout io.Writer) error {
	var failed []rewrapFailure
	// keep records what a rewrap could not move and stops only for other
	// errors (the database unreachable, say).
	keep := func(n int, err error) (int, error) {
		left := rewrapErrors(err)
		if len(left) == 0 {
			return n, err
		}
		for _, re := range left {
			failed = append(failed, rewrapFailure{Table: re.Table, Columns: re.Prefix + "*", Count: re.Count, IDs: re.IDs})
			log.Error("blobs left under their old KEK", "alert", true, "table", re.Table, "columns", re.Prefix+"*",
				"count", re.Count, "err", re.Error())
		}
		return n, nil
	}
	jobs, err := keep(d.Inbox.Rewrap(ctx))
	if err != nil {
		return err
	}
	secrets, err := keep(d.Requesters.Rewrap(ctx))
	if err != nil {
		return err
	}
	edges, err := keep(ingest.NewRegistry(d.DB, d.Keys).Rewrap(ctx))
	if err != nil {
		return err
	}
	log.Info("rewrapped to the active KEK", "kek_id", d.Keys.ActiveID(), "jobs", jobs, "webhook_secrets", secrets, "edge_secrets", edges)
	out := struct {
		ActiveKEKID    string          `json:"active_kek_id"`
		Jobs           int             `json:"jobs"`
		WebhookSecrets int             `json:"webhook_secrets"`
		EdgeSecrets    int             `json:"edge_secrets"`
		Failed         []rewrapFailure `json:"failed,omitempty"`
	}{d.Keys.ActiveID(), jobs, secrets, edges, failed}
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		return err
	}
	if len(failed) > 0 {
		n := 0
		for _, f := range failed {
			n += f.Count
		}
		return fmt.Errorf("%w: %d blob(s) did not open (see \"failed\" in the output); keep the old KEK in the keyring", credentials.ErrRewrapIncomplete, n)
	}
	return nil
}

// rewrapErrors lists the *RewrapErrors in err's tree (a wrapped one, or
// several joined); none when err is anything else, which must stop the
// command.
func rewrapErrors(err error) []*credentials.RewrapError {
	if err == nil {
		return nil
	}
	if re, ok := err.(*credentials.RewrapError); ok {
		return []*credentials.RewrapError{re}
	}
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		var out []*credentials.RewrapError
		for _, inner := range e.Unwrap() {
			found := rewrapErrors(inner)
			if found == nil {
				return nil
			}
			out = append(out, found...)
		}
		return out
	case interface{ Unwrap() error }:
		return rewrapErrors(e.Unwrap())
	}
	return nil
}
