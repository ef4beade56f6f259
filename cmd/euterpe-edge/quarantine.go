package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// The sync commands work on the spool file (sync.db in the state
// directory) beside the running daemon: each is one short transaction on
// the file, which SQLite's busy timeout serialises with the daemon's, and
// the daemon's spool reads its totals again once another process has
// committed (spool.Spool's data version).

const quarantineUsage = `usage: euterpe-edge sync quarantine <command> [flags]
  list                  print the batches central refused, one JSON object a line, oldest first
  resend ID… | --all    put their events and gaps back into the spool: the daemon sends them again
flags: -state-dir (EUTERPE_STATE_DIR), -sync-spool-max-mb (EUTERPE_SYNC_SPOOL_MAX_MB), as the daemon has them
`

// fileOwner is the uid a file belongs to, and euid the one this process
// runs as; tests replace them.
var (
	fileOwner = func(fi os.FileInfo) (int, bool) {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return 0, false
		}
		return int(st.Uid), true
	}
	euid = os.Geteuid
)

func syncCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) < 2 || args[0] != "quarantine" || (args[1] != "list" && args[1] != "resend") {
		if len(args) > 0 && (args[len(args)-1] == "-h" || args[len(args)-1] == "--help" || args[len(args)-1] == "help") {
			fmt.Fprint(stdout, quarantineUsage)
			return 0
		}
		fmt.Fprint(stderr, quarantineUsage)
		return 2
	}
	sub, args := args[1], args[2:]
	cfg := daemon.NewConfig("euterpe-edge sync quarantine "+sub, getenv)
	var stateDir string
	var maxMB int
	var all bool
	cfg.String(&stateDir, "state-dir", "EUTERPE_STATE_DIR", daemon.DefaultStateDir("euterpe"), "the daemon's state directory, which holds sync.db", daemon.CheckAbsPath)
	cfg.Int(&maxMB, "sync-spool-max-mb", "EUTERPE_SYNC_SPOOL_MAX_MB", defaultSpoolMaxMB, 1, 1<<20,
		"the spool's budget: resend refuses to take the spool's events past it or past the daemon's, the smaller")
	if sub == "resend" {
		cfg.Bool(&all, "all", "", false, "resend every quarantined batch that keeps something to resend")
	}
	err := cfg.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		cfg.Usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "euterpe-edge:", err)
		return 2
	}
	ids, err := quarantineIDs(sub, cfg.Args(), all)
	if err != nil {
		fmt.Fprintf(stderr, "euterpe-edge: %s\n%s", daemon.CapMessage(err.Error()), quarantineUsage)
		return 2
	}
	sp, err := openForOperator(ctx, filepath.Join(stateDir, spool.File), sub == "resend", int64(maxMB)<<20)
	if err != nil {
		return failed(stderr, err)
	}
	defer sp.Close()
	if sub == "list" {
		err = listQuarantine(ctx, sp, stdout)
	} else {
		err = resendQuarantine(ctx, sp, ids, stdout, stderr)
	}
	if err != nil {
		return failed(stderr, err)
	}
	return 0
}

func failed(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "euterpe-edge:", daemon.CapMessage(err.Error()))
	return 1
}

// quarantineIDs reads resend's ids; list takes none.
func quarantineIDs(sub string, args []string, all bool) ([]int64, error) {
	switch {
	case sub == "list" && len(args) > 0:
		return nil, fmt.Errorf("list takes no argument, not %q", args[0])
	case sub == "list":
		return nil, nil
	case all && len(args) > 0:
		return nil, errors.New("give either the ids to resend or --all, not both")
	case !all && len(args) == 0:
		return nil, errors.New("give the ids to resend (see list), or --all")
	case all:
		return nil, nil // every one
	}
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			if strings.HasPrefix(a, "-") {
				return nil, fmt.Errorf("flags go before the ids, not %q after them", a)
			}
			return nil, fmt.Errorf("%q is not a quarantine id (a number, as list prints it)", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// openForOperator opens the daemon's spool file, only as the user it
// belongs to: SQLite creates the -wal and -shm files of a connection that
// finds none (the daemon stopped), and a pair left owned by root (a
// command killed before it removed them) would keep the daemon from
// opening its spool. Only resend opens it to write.
func openForOperator(ctx context.Context, path string, write bool, maxBytes int64) (*spool.Spool, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no sync spool at %s: is EUTERPE_STATE_DIR (-state-dir) the daemon's, and sync on (EUTERPE_SYNC_URL)?", path)
	}
	if err != nil {
		return nil, fmt.Errorf("sync spool: %w", err)
	}
	if uid, ok := fileOwner(fi); ok && uid != euid() {
		return nil, fmt.Errorf("%s belongs to uid %d and this command runs as uid %d: run it as the daemon's user (sudo -u euterpe euterpe-edge sync quarantine …)", path, uid, euid())
	}
	if !write {
		return spool.OpenReadOnly(ctx, path)
	}
	return spool.OpenExisting(ctx, path, maxBytes)
}

// quarantineLine is one batch as list prints it.
type quarantineLine struct {
	ID      int64  `json:"id"`
	At      string `json:"at"`
	Status  int    `json:"status"` // 0: set aside by the edge itself
	Code    string `json:"code"`
	Message string `json:"message"`
	Events  int    `json:"events"`
	Gaps    int    `json:"gaps"`
	// Resendable is false for an item the edge kept no body of.
	Resendable bool `json:"resendable"`
}

func listQuarantine(ctx context.Context, sp *spool.Spool, stdout io.Writer) error {
	qs, err := sp.QuarantineList(ctx)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for _, q := range qs {
		l := quarantineLine{ID: q.ID, At: time.UnixMilli(q.AtMS).UTC().Format(time.RFC3339Nano), Status: q.Status,
			Code: q.Code, Message: q.Message, Events: q.Events, Gaps: q.Gaps, Resendable: q.Body != ""}
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	return nil
}

func resendQuarantine(ctx context.Context, sp *spool.Spool, ids []int64, stdout, stderr io.Writer) error {
	var res spool.Resent
	var err error
	if ids == nil {
		res, err = sp.ResendAll(ctx)
	} else {
		res, err = sp.Resend(ctx, ids)
	}
	if err != nil {
		return err
	}
	if len(res.Kept) > 0 {
		fmt.Fprintf(stderr, "euterpe-edge: %d quarantined batches keep nothing to resend and stay: %s\n",
			len(res.Kept), daemon.CapMessage(strings.Trim(fmt.Sprint(res.Kept), "[]")))
	}
	if res.IDs == nil {
		res.IDs = []int64{}
	}
	enc := json.NewEncoder(stdout)
	return enc.Encode(map[string]any{"resent": res.IDs, "events": res.Events, "gaps": res.Gaps, "bytes": res.Bytes})
}
