package trash_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/trash"
)

// TestSweepAgesEntryFromFirstSight: an entry whose directory mtime is far
// in the past (trashed while the clock was behind: no RTC, before NTP)
// still stays in the trash for the whole retention after the cleaner
// first saw it with a synchronized clock.
func TestSweepAgesEntryFromFirstSight(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name  string
		mtime time.Time
	}{
		{"mtime years in the past", now.AddDate(-7, 0, 0)},
		{"mtime at the epoch", time.Unix(0, 0)},
		{"mtime just past the retention", now.Add(-retention - time.Hour)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			p := f.file("1/10/a.bin")
			f.age(filepath.Join(f.trash, "1/10"), c.mtime)
			cl := f.cleaner()
			for _, step := range []struct {
				after time.Duration
				gone  bool
			}{{0, false}, {time.Hour, false}, {retention - time.Hour, false}, {retention + time.Hour, true}} {
				cl.Now = func() time.Time { return now.Add(step.after) }
				if _, err := cl.Sweep(context.Background()); err != nil {
					t.Fatal(err)
				}
				if exists(p) == step.gone {
					t.Fatalf("%s after first sight: gone=%v, want %v", step.after, !step.gone, step.gone)
				}
			}
		})
	}
}

// TestSweepAgeRunsFromLaterOfMtimeAndFirstSight: an entry trashed with
// the clock ahead (mtime in the future) is not kept until that future,
// and an entry refilled after it was first seen (a re-run moving its file
// into an entry a refused attempt left empty) ages from the refill.
func TestSweepAgeRunsFromLaterOfMtimeAndFirstSight(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name string
		// mtime is set before the first sweep; refill, when non-zero,
		// is the entry's mtime set after it.
		mtime, refill time.Time
		// goneAfter: the first sweep after which the entry is gone.
		goneAfter time.Duration
	}{
		{name: "mtime ten years ahead", mtime: now.AddDate(10, 0, 0), goneAfter: retention + time.Hour},
		{name: "refilled after first sight", mtime: now, refill: now.Add(10 * 24 * time.Hour), goneAfter: retention + 10*24*time.Hour + time.Hour},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			p := f.file("1/10/a.bin")
			entry := filepath.Join(f.trash, "1/10")
			f.age(entry, c.mtime)
			cl := f.cleaner()
			steps := []time.Duration{0, 10 * 24 * time.Hour, retention + time.Hour, retention + 10*24*time.Hour + time.Hour}
			for _, after := range steps {
				if after > 0 && !c.refill.IsZero() && after == 10*24*time.Hour {
					f.age(entry, c.refill)
				}
				cl.Now = func() time.Time { return now.Add(after) }
				if _, err := cl.Sweep(context.Background()); err != nil {
					t.Fatal(err)
				}
				if want := after >= c.goneAfter; exists(p) == want {
					t.Fatalf("%s after first sight: gone=%v, want %v", after, !want, want)
				}
			}
		})
	}
}

// TestSweepRemovesNothingWhileUnsynchronized: with the clock not
// synchronized the cleaner removes nothing, not even an entry it marked
// old while the clock was synchronized, and marks nothing new (a mark
// written then would carry the wrong time).
func TestSweepRemovesNothingWhileUnsynchronized(t *testing.T) {
	f := newFixture(t)
	seen := f.file("1/10/a.bin")
	f.age(filepath.Join(f.trash, "1/10"), old)
	cl := f.cleaner()
	f.seenLongAgo(cl)
	fresh := f.file("2/20/b.bin")
	f.age(filepath.Join(f.trash, "2/20"), time.Unix(0, 0))
	link := f.link("3", f.outside)
	f.age(link, time.Unix(0, 0))
	synced := false
	cl.Synced = func() bool { return synced }
	for range 3 {
		n, err := cl.Sweep(context.Background())
		if !errors.Is(err, trash.ErrClockUnsynchronized) || n != 0 {
			t.Fatalf("unsynchronized sweep: removed %d, %v", n, err)
		}
	}
	for _, p := range []string{seen, fresh, link} {
		if !exists(p) {
			t.Fatalf("%s removed while the clock was not synchronized", p)
		}
	}
	if exists(filepath.Join(f.trash, "2", trash.MarkName("20"))) {
		t.Fatal("entry marked while the clock was not synchronized")
	}
	synced = true
	if n, err := cl.Sweep(context.Background()); err != nil || n != 1 {
		t.Fatalf("synchronized sweep: removed %d, %v; want the entry marked long ago", n, err)
	}
	if exists(seen) || !exists(fresh) || !exists(link) {
		t.Fatalf("after synchronization: old entry kept=%v, fresh entry kept=%v, fresh link kept=%v", exists(seen), exists(fresh), exists(link))
	}
}

// TestRunWarnsOnceWhileUnsynchronized: sweeps waiting for the clock log
// one warning, not one per sweep, and the resumption once.
func TestRunWarnsOnceWhileUnsynchronized(t *testing.T) {
	f := newFixture(t)
	var logs testsvc.LogBuffer
	var synced atomic.Bool
	var sweeps atomic.Int32
	cl := &trash.Cleaner{Dir: f.trash, Retention: retention, Interval: 5 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Synced: func() bool {
			if sweeps.Add(1) == 6 {
				synced.Store(true)
			}
			return synced.Load()
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { cl.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for sweeps.Load() < 10 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	out := logs.String()
	if got := strings.Count(out, "level=WARN"); got != 1 {
		t.Fatalf("%d warnings over %d sweeps, want 1:\n%s", got, sweeps.Load(), out)
	}
	if got := strings.Count(out, "trash cleanup resumes"); got != 1 {
		t.Fatalf("resumption logged %d times:\n%s", got, out)
	}
}

// TestSweepDropsMarksOfGoneEntries: markers whose entry is gone (removed
// by hand) go, and a job directory holding nothing else is removed.
func TestSweepDropsMarksOfGoneEntries(t *testing.T) {
	f := newFixture(t)
	f.file("1/10/a.bin")
	f.file("2/20/b.bin")
	f.link("4", f.outside)
	cl := f.cleaner()
	if _, err := cl.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{filepath.Join("1", trash.MarkName("10")), filepath.Join("2", trash.MarkName("20")), trash.MarkName("4")} {
		if !exists(filepath.Join(f.trash, m)) {
			t.Fatalf("no marker %s", m)
		}
	}
	for _, p := range []string{"1/10", "4"} {
		if err := os.RemoveAll(filepath.Join(f.trash, p)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"1", trash.MarkName("4")} {
		if exists(filepath.Join(f.trash, gone)) {
			t.Fatalf("%s left after its entry went", gone)
		}
	}
	if !exists(filepath.Join(f.trash, "2", trash.MarkName("20"))) {
		t.Fatal("marker of a present entry removed")
	}
}

// TestSweepMarkerNeverFollowsLinks: a symlink, or a directory, planted at
// a marker's name is replaced, never written through, and the entry is
// treated as first seen now.
func TestSweepMarkerNeverFollowsLinks(t *testing.T) {
	for _, c := range []struct {
		name  string
		plant func(f *fixture, at string)
	}{
		{"symlink to a file outside", func(f *fixture, at string) {
			if err := os.Symlink(filepath.Join(f.outside, "victim.bin"), at); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func(f *fixture, at string) { f.file(filepath.Join(at, "x")) }},
		{"garbage", func(f *fixture, at string) {
			if err := os.WriteFile(at, []byte("not a time"), 0o640); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			victim := f.file(filepath.Join(f.outside, "victim.bin"))
			p := f.file("1/10/a.bin")
			f.age(filepath.Join(f.trash, "1/10"), old)
			c.plant(f, filepath.Join(f.trash, "1", trash.MarkName("10")))
			if n, err := f.cleaner().Sweep(context.Background()); err != nil || n != 0 {
				t.Fatalf("sweep: removed %d, %v", n, err)
			}
			f.intact(victim)
			if !exists(p) {
				t.Fatal("entry removed on a planted marker")
			}
			st, err := os.Lstat(filepath.Join(f.trash, "1", trash.MarkName("10")))
			if err != nil || !st.Mode().IsRegular() {
				t.Fatalf("marker not rewritten: %v %v", st, err)
			}
		})
	}
}

// TestKernelClockSynchronized decides as timedatectl does: adjtimex's
// maximum error below 16 s, STA_UNSYNC ignored; where adjtimex is denied
// (ProtectClock=yes), the timesyncd flag file.
func TestKernelClockSynchronized(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "synchronized")
	absent := flag + ".absent"
	if err := os.WriteFile(flag, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	adj := func(maxerr int64, status int32, err error) func(*unix.Timex) (int, error) {
		return func(tx *unix.Timex) (int, error) {
			if err != nil {
				return -1, err
			}
			tx.Maxerror, tx.Status = maxerr, status
			return unix.TIME_OK, nil
		}
	}
	for _, c := range []struct {
		name string
		adj  func(*unix.Timex) (int, error)
		flag string
		want bool
	}{
		{"disciplined", adj(150_000, 0, nil), absent, true},
		{"just under 16 s", adj(15_999_999, 0, nil), absent, true},
		{"16 s: never set or left alone too long", adj(16_000_000, unix.STA_UNSYNC, nil), flag, false},
		{"STA_UNSYNC with a small error", adj(150_000, unix.STA_UNSYNC, nil), absent, true},
		{"denied, timesyncd synchronized", adj(0, 0, unix.EPERM), flag, true},
		{"denied, no timesyncd flag", adj(0, 0, unix.EPERM), absent, false},
		{"other error", adj(0, 0, unix.EINVAL), flag, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := trash.ClockSynchronized(c.adj, c.flag); got != c.want {
				t.Fatalf("synchronized %v, want %v", got, c.want)
			}
		})
	}
}
