package library_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library"
)

// NewOpening refuses a bad setting at once, as New does; only a database
// that cannot be opened is left to Run.
func TestNewOpeningRefusesSettingsAtOnce(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	state, card := t.TempDir(), filepath.Join(t.TempDir(), "card")
	if err := os.Symlink(filepath.Join(card, "library.db"), filepath.Join(state, "library.db")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		set   func(*library.Settings)
		valid bool
	}{
		{"relative trash", func(s *library.Settings) { s.TrashDir = "trash" }, false},
		{"trash outside the state directory", func(s *library.Settings) { s.TrashDir = t.TempDir() }, false},
		{"relative root", func(s *library.Settings) { s.Roots = "lib" }, false},
		{"database cannot be opened", func(*library.Settings) {}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := library.Defaults()
			c.set(&s)
			o, err := library.NewOpening(context.Background(), log, state, "w", s)
			var se *daemon.SettingError
			if c.valid {
				if err != nil {
					t.Fatalf("NewOpening: %v", err)
				}
				if o.Library() != nil {
					t.Fatal("the library is open on a link to nowhere")
				}
				return
			}
			if !errors.As(err, &se) {
				t.Fatalf("want a *daemon.SettingError, got %v", err)
			}
		})
	}
}

// A shutdown while the open is being retried ends Run at once, and nothing
// is opened afterwards even once the database could be.
func TestOpeningShutdownDuringRetriesOpensNothing(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	state, card := t.TempDir(), filepath.Join(t.TempDir(), "card")
	if err := os.Symlink(filepath.Join(card, "library.db"), filepath.Join(state, "library.db")); err != nil {
		t.Fatal(err)
	}
	o, err := library.NewOpening(context.Background(), log, state, "w", library.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop")
	}
	if err := os.Mkdir(card, 0o700); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past the first retry's wait
	if _, err := os.Stat(filepath.Join(card, "library.db")); !os.IsNotExist(err) {
		t.Fatalf("the database was opened after the shutdown: %v", err)
	}
	if o.Library() != nil || o.Close() != nil {
		t.Fatal("an Opening stopped before opening holds no library")
	}
}

// A root that does not exist yet (a disk mounted after the edge starts)
// does not stop the edge: the open is retried, and the library opens and
// scans once the root appears.
func TestOpeningWaitsForAMissingRoot(t *testing.T) {
	fastRetries(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	root := filepath.Join(t.TempDir(), "usb", "music")
	s := library.Defaults()
	s.Roots = root
	o, err := library.NewOpening(context.Background(), log, t.TempDir(), "w", s)
	if err != nil {
		t.Fatalf("NewOpening with a root not there yet: %v", err)
	}
	if o.Library() != nil || !errors.Is(o.Err(), os.ErrNotExist) {
		t.Fatalf("library %v, err %v: want none yet, for the missing root", o.Library(), o.Err())
	}
	runOpening(t, o)
	time.Sleep(50 * time.Millisecond)
	if err := os.MkdirAll(root, 0o750); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the library to open", func() bool { return o.Library() != nil })
}

// logEntry is one JSON line of a captured log.
type logEntry struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
	Err   string `json:"err"`
	Root  string `json:"root"`
}

func logEntries(t *testing.T, logs *testsvc.LogBuffer) []logEntry {
	t.Helper()
	var out []logEntry
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if line == "" {
			continue
		}
		var e logEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// countLog counts the entries from the from-th on that match.
func countLog(t *testing.T, logs *testsvc.LogBuffer, from int, match func(logEntry) bool) int {
	t.Helper()
	n := 0
	for i, e := range logEntries(t, logs) {
		if i >= from && match(e) {
			n++
		}
	}
	return n
}

// runOpening runs o with fast retries until the test ends; the returned
// stop ends Run and waits for it, so nothing touches the directories or
// the test's hooks afterwards.
func runOpening(t *testing.T, o *library.Opening) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
			if err := o.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not stop")
		}
	}
	t.Cleanup(stop)
	return stop
}

// fastRetries makes the Openings made until the test ends retry within
// milliseconds.
func fastRetries(t *testing.T) {
	old := library.OpenBackoff
	library.OpenBackoff = lease.Backoff{Base: time.Millisecond, Cap: 5 * time.Millisecond}
	t.Cleanup(func() { library.OpenBackoff = old })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// replaceLink points link at target in one step (a rename), so no retry
// sees the link missing and creates a directory in its place.
func replaceLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".new"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// While the open is retried, every new reason it fails for is logged once
// at warn or error level and becomes Opening.Err, a setting error that
// only a retry meets (a trash that leads out of the state directory once a
// card is mounted) at error level; a reason that repeats stays at debug
// level, however long the retries last, and the retries go on until the
// open succeeds.
func TestOpeningLogsEachNewReasonOnce(t *testing.T) {
	fastRetries(t)
	base := t.TempDir()
	state, card, inside := filepath.Join(base, "state"), filepath.Join(base, "card"), filepath.Join(base, "state", "real")
	outside1, outside2 := t.TempDir(), t.TempDir()
	mkdir(t, inside)
	link := filepath.Join(state, "link")
	replaceLink(t, inside, link)
	db := filepath.Join(state, "library.db")
	replaceLink(t, filepath.Join(card, "library.db"), db)
	junk := filepath.Join(base, "junk")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a database\n", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testsvc.LogBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := library.Defaults()
	s.TrashDir = filepath.Join(link, "trash")
	s.Watch = false
	o, err := library.NewOpening(context.Background(), log, state, "w", s)
	if err != nil {
		t.Fatal(err)
	}
	if o.Library() != nil {
		t.Fatal("the library is open on a link to nowhere")
	}
	stop := runOpening(t, o)

	steps := []struct {
		name    string
		change  func()
		reason  string // in the err of the log entries of this step
		level   string // of the one entry that reports it
		setting bool   // Err is a *daemon.SettingError
	}{
		{"the trash leads out of the state directory", func() { replaceLink(t, outside1, link) },
			"EUTERPE_LIBRARY_TRASH_DIR", "ERROR", true},
		{"it leads elsewhere out of it", func() { replaceLink(t, outside2, link) },
			outside2, "ERROR", true},
		{"the trash is fixed, the database is still missing", func() { replaceLink(t, inside, link) },
			"library.db", "WARN", false},
		{"the database is not one", func() { replaceLink(t, junk, db) },
			"not a database", "WARN", false},
	}
	for _, st := range steps {
		from := len(logEntries(t, &logs))
		st.change()
		mine := func(e logEntry) bool { return strings.Contains(e.Err, st.reason) }
		// Several attempts meet the reason, whatever level each is logged at.
		waitFor(t, st.name+": three attempts", func() bool { return countLog(t, &logs, from, mine) >= 3 })
		loud := countLog(t, &logs, from, func(e logEntry) bool { return mine(e) && e.Level != "DEBUG" })
		at := countLog(t, &logs, from, func(e logEntry) bool { return mine(e) && e.Level == st.level })
		if loud != 1 || at != 1 {
			t.Errorf("%s: want the reason logged once at %s, got %d at warn or error (%d at %s):\n%s",
				st.name, st.level, loud, at, st.level, logs.String())
		}
		var se *daemon.SettingError
		if err := o.Err(); err == nil || !strings.Contains(err.Error(), st.reason) || errors.As(err, &se) != st.setting {
			t.Errorf("%s: Err() = %v, want the reason %q (a setting error: %v)", st.name, err, st.reason, st.setting)
		}
	}

	replaceLink(t, filepath.Join(card, "library.db"), db)
	mkdir(t, card)
	waitFor(t, "the library to open", func() bool { return o.Library() != nil })
	stop()
	if o.Err() != nil {
		t.Fatalf("Err() = %v once open", o.Err())
	}
}

// The warning about roots this process cannot write is logged once per
// start, by the first attempt that gets as far as the roots, also when the
// first attempt fails before them.
func TestOpeningWarnsUnwritableRootsOnce(t *testing.T) {
	fastRetries(t)
	cases := []struct {
		name        string
		stateBroken bool // the first attempt cannot create the state directory
	}{
		{"the first attempt reaches the roots", false},
		{"the first attempt fails before the roots", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			ro, real, card := filepath.Join(base, "ro"), filepath.Join(base, "real"), filepath.Join(base, "card")
			mkdir(t, ro)
			mkdir(t, filepath.Join(real, "state"))
			replaceLink(t, filepath.Join(card, "library.db"), filepath.Join(real, "state", "library.db"))
			// The state directory is reached through a link: to a file
			// (which no one can make a directory of, root included), then
			// to a directory whose database is on a card not mounted yet.
			file := filepath.Join(base, "file")
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(base, "link")
			if c.stateBroken {
				replaceLink(t, file, link)
			} else {
				replaceLink(t, real, link)
			}
			defer library.SetRootWritable(func(root string) error {
				if root == ro {
					return syscall.EROFS
				}
				return nil
			})()
			var logs testsvc.LogBuffer
			log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			s := library.Defaults()
			s.Roots = ro
			s.Watch = false
			o, err := library.NewOpening(context.Background(), log, filepath.Join(link, "state"), "w", s)
			if err != nil {
				t.Fatal(err)
			}
			stop := runOpening(t, o)
			replaceLink(t, real, link)
			dbFails := func(e logEntry) bool { return strings.Contains(e.Err, "library.db") }
			waitFor(t, "three attempts past the roots", func() bool { return countLog(t, &logs, 0, dbFails) >= 3 })
			mkdir(t, card)
			waitFor(t, "the library to open", func() bool { return o.Library() != nil })
			stop()
			warned := countLog(t, &logs, 0, func(e logEntry) bool {
				return strings.Contains(e.Msg, "library root is not writable") && e.Root == ro && e.Level == "WARN"
			})
			if warned != 1 {
				t.Fatalf("want the unwritable root warned about once, got %d:\n%s", warned, logs.String())
			}
		})
	}
}
