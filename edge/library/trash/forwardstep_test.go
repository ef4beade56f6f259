package trash_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/trash"
)

// testClocks is a wall clock and a boot clock the test moves: real time
// passing moves both, a step moves the wall clock alone.
type testClocks struct {
	wall time.Time
	up   time.Duration
	boot string
}

func newTestClocks() *testClocks {
	return &testClocks{wall: time.Now(), up: time.Hour, boot: "0b5c3d6e-1f2a-4b3c-8d4e-5f6a7b8c9d0e"}
}

func (k *testClocks) pass(d time.Duration) { k.wall, k.up = k.wall.Add(d), k.up+d }
func (k *testClocks) step(d time.Duration) { k.wall = k.wall.Add(d) }

// reboot starts a new boot after the machine was off for off.
func (k *testClocks) reboot(off time.Duration) {
	k.wall, k.up, k.boot = k.wall.Add(off), time.Minute, "7e6d5c4b-3a2f-4e1d-9c8b-7a6f5e4d3c2b"
}

// cleaner returns a cleaner of f's trash reading k, logging into logs
// when it is not nil.
func (k *testClocks) cleaner(f *fixture, logs *testsvc.LogBuffer) *trash.Cleaner {
	cl := f.cleaner()
	cl.Now = func() time.Time { return k.wall }
	cl.Boot = func() (trash.BootClock, error) { return trash.BootClock{ID: k.boot, Elapsed: k.up}, nil }
	if logs != nil {
		cl.Log = slog.New(slog.NewTextHandler(logs, nil))
	}
	return cl
}

func sweepOK(t *testing.T, cl *trash.Cleaner) int {
	t.Helper()
	n, err := cl.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readNS reads a time the cleaner recorded in p.
func readNS(t *testing.T, p string) time.Time {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return time.Unix(0, ns)
}

// TestSweepClockSteppedForwardKeepsRetention steps forward by 60 days a
// clock that counts as synchronized (an NTP server serving a date months
// ahead). No entry may go at that sweep: each is removed only once its
// retention of time that really passed (on the boot clock) has run, from
// its first sight or, for an entry refilled after it, from the refill.
// The step is caught as well by a cleaner started after it in the same
// boot, and logged once.
func TestSweepClockSteppedForwardKeepsRetention(t *testing.T) {
	for _, c := range []struct {
		name    string
		restart bool
	}{{"one cleaner", false}, {"cleaner restarted in the same boot", true}} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			a := f.file("1/10/a.bin")
			f.age(filepath.Join(f.trash, "1/10"), time.Unix(0, 0))
			b := f.file("1/11/b.bin")
			k := newTestClocks()
			var logs testsvc.LogBuffer
			cl := k.cleaner(f, &logs)
			sweepOK(t, cl)
			k.pass(10 * 24 * time.Hour)
			f.age(filepath.Join(f.trash, "1/11"), k.wall) // refilled
			sweepOK(t, cl)
			k.pass(24 * time.Hour)
			if c.restart {
				cl = k.cleaner(f, &logs)
			}
			k.step(60 * 24 * time.Hour)
			if n := sweepOK(t, cl); n != 0 || !exists(a) || !exists(b) {
				t.Fatalf("sweep after the step removed %d entries", n)
			}
			out := logs.String()
			if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "step=1440h0m0s") {
				t.Fatalf("the step is not logged once with its size:\n%s", out)
			}
			// Real time since first sight: 11 days so far.
			for _, s := range []struct {
				at     time.Duration
				aGone  bool
				bGone  bool
				reason string
			}{
				{retention - time.Hour, false, false, "before a's retention"},
				{retention + time.Hour, true, false, "after a's retention"},
				{retention + 10*24*time.Hour - time.Hour, true, false, "before b's retention from its refill"},
				{retention + 10*24*time.Hour + time.Hour, true, true, "after b's retention"},
			} {
				k.pass(s.at - (k.up - time.Hour))
				sweepOK(t, cl)
				if exists(a) == s.aGone || exists(b) == s.bGone {
					t.Fatalf("%s: a gone=%v b gone=%v", s.reason, !exists(a), !exists(b))
				}
			}
			if got := strings.Count(logs.String(), "level=WARN"); got != 1 {
				t.Fatalf("%d warnings, want the one of the step:\n%s", got, logs.String())
			}
		})
	}
}

// TestSweepShiftsEveryMarkByTheStep: a forward step larger than the
// tolerance moves the start of every marked entry's age, in the trash
// directory and in every job directory, forward by the step; a smaller
// one moves nothing. An entry refilled after its first sight, whose age
// ran from its mtime, gets a marker at that mtime plus the step.
func TestSweepShiftsEveryMarkByTheStep(t *testing.T) {
	for _, c := range []struct {
		name        string
		step, shift time.Duration
	}{
		{"no step", 0, 0},
		{"step just under the tolerance", trash.StepTolerance - time.Second, 0},
		{"step just over the tolerance", trash.StepTolerance + time.Second, trash.StepTolerance + time.Second},
		{"step of 60 days", 60 * 24 * time.Hour, 60 * 24 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			for _, p := range []string{"1/10/a.bin", "1/11/b.bin", "2/20/c.bin", "4"} {
				f.file(p)
			}
			f.link("3", f.outside)
			k := newTestClocks()
			var logs testsvc.LogBuffer
			cl := k.cleaner(f, &logs)
			sweepOK(t, cl)
			seen := k.wall
			k.pass(2 * time.Hour)
			refill := k.wall
			f.age(filepath.Join(f.trash, "2/20"), refill)
			k.pass(time.Hour)
			k.step(c.step)
			sweepOK(t, cl)
			for _, m := range []struct {
				rel  string
				from time.Time
			}{
				{filepath.Join("1", trash.MarkName("10")), seen},
				{filepath.Join("1", trash.MarkName("11")), seen},
				{filepath.Join("2", trash.MarkName("20")), refill},
				{trash.MarkName("3"), seen},
				{trash.MarkName("4"), seen},
			} {
				want := m.from.Add(c.shift)
				if c.shift == 0 {
					want = seen
				}
				if got := readNS(t, filepath.Join(f.trash, m.rel)); !got.Equal(want) {
					t.Errorf("%s: first sight %s, want %s", m.rel, got.Sub(seen), want.Sub(seen))
				}
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != (c.shift > 0) {
				t.Fatalf("warned=%v for a step of %s:\n%s", warned, c.step, logs.String())
			}
		})
	}
}

// TestSweepClockRecordAcrossBoots: a record of another boot, or one
// written before boot clocks were recorded (a bare time), gives nothing to
// compare with: the sweep moves no marker (a boot clock restarting at zero
// must not pass for a step), keeps refusing a clock set back before the
// recorded time, and records the boot clock, so that a step later in the
// same boot is caught.
func TestSweepClockRecordAcrossBoots(t *testing.T) {
	for _, c := range []struct {
		name string
		// between runs after the first sweep, which marked the entry.
		between func(t *testing.T, f *fixture, k *testClocks)
		setBack bool
	}{
		{name: "another boot", between: func(t *testing.T, f *fixture, k *testClocks) {
			k.pass(5 * 24 * time.Hour)
			k.reboot(3 * 24 * time.Hour)
		}},
		{name: "bare time of an earlier version", between: func(t *testing.T, f *fixture, k *testClocks) {
			writeBare(t, f, k.wall)
			k.pass(time.Hour)
		}},
		{name: "bare time of an earlier version, later than the clock", setBack: true, between: func(t *testing.T, f *fixture, k *testClocks) {
			writeBare(t, f, k.wall.Add(24*time.Hour))
			k.pass(time.Hour)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			p := f.file("1/10/a.bin")
			f.age(filepath.Join(f.trash, "1/10"), time.Unix(0, 0))
			k := newTestClocks()
			mark := filepath.Join(f.trash, "1", trash.MarkName("10"))
			cl := k.cleaner(f, nil)
			sweepOK(t, cl)
			seen := readNS(t, mark)
			c.between(t, f, k)
			cl = k.cleaner(f, nil)
			_, err := cl.Sweep(context.Background())
			if c.setBack {
				if !errors.Is(err, trash.ErrClockSetBack) {
					t.Fatalf("sweep before a bare recorded time: %v, want ErrClockSetBack", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := readNS(t, mark); !got.Equal(seen) {
				t.Fatalf("marker moved by %s with nothing to compare with", got.Sub(seen))
			}
			k.pass(time.Hour)
			k.step(60 * 24 * time.Hour)
			if n := sweepOK(t, cl); n != 0 || !exists(p) {
				t.Fatal("a step after the first sweep of this boot emptied the trash")
			}
		})
	}
}

// writeBare writes the trash's clock record as an earlier version did: a
// bare time.
func writeBare(t *testing.T, f *fixture, at time.Time) {
	t.Helper()
	p := filepath.Join(f.trash, trash.ClockName)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strconv.FormatInt(at.UnixNano(), 10)+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
}

// TestSweepShiftNeverWritesThroughMarker: a marker that is a hard link to
// a file outside the trash, or a symlink to one, is replaced when the
// step moves it, never written through; the entry still is not emptied.
func TestSweepShiftNeverWritesThroughMarker(t *testing.T) {
	for _, c := range []struct {
		name  string
		plant func(target, at string) error
	}{
		{"hard link", os.Link},
		{"symlink", os.Symlink},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			p := f.file("1/10/a.bin")
			f.age(filepath.Join(f.trash, "1/10"), time.Unix(0, 0))
			k := newTestClocks()
			cl := k.cleaner(f, nil)
			sweepOK(t, cl)
			mark := filepath.Join(f.trash, "1", trash.MarkName("10"))
			victim := filepath.Join(f.outside, "victim")
			content := strconv.FormatInt(k.wall.UnixNano(), 10) + "\n"
			if err := os.WriteFile(victim, []byte(content), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(mark); err != nil {
				t.Fatal(err)
			}
			if err := c.plant(victim, mark); err != nil {
				t.Fatal(err)
			}
			k.pass(time.Hour)
			k.step(60 * 24 * time.Hour)
			if n := sweepOK(t, cl); n != 0 || !exists(p) {
				t.Fatal("entry emptied at the step")
			}
			if data, err := os.ReadFile(victim); err != nil || string(data) != content {
				t.Fatalf("written through the marker: %q %v", data, err)
			}
			var st, vst unix.Stat_t
			if err := unix.Lstat(mark, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				t.Fatalf("marker not a regular file: %v", err)
			}
			if err := unix.Stat(victim, &vst); err != nil || st.Ino == vst.Ino || vst.Nlink != 1 {
				t.Fatalf("marker still the outside file (inode %d, outside %d, links %d): %v", st.Ino, vst.Ino, vst.Nlink, err)
			}
		})
	}
}

// TestKernelBootClock: the kernel's boot clock reads, keeps its id within
// the boot and does not go back, and a cleaner on the system's clocks
// records it beside the sweep's time.
func TestKernelBootClock(t *testing.T) {
	b1, err := trash.KernelBootClock()
	if err != nil {
		t.Fatal(err)
	}
	b2, err := trash.KernelBootClock()
	if err != nil {
		t.Fatal(err)
	}
	if b1.ID == "" || b1.ID != b2.ID || b1.Elapsed <= 0 || b2.Elapsed < b1.Elapsed {
		t.Fatalf("boot clock read %+v then %+v", b1, b2)
	}
	f := newFixture(t)
	sweepOK(t, f.cleaner())
	data, err := os.ReadFile(filepath.Join(f.trash, trash.ClockName))
	if err != nil {
		t.Fatal(err)
	}
	if fields := strings.Fields(string(data)); len(fields) != 3 || fields[1] != b1.ID {
		t.Fatalf("clock record %q does not hold boot %s", data, b1.ID)
	}
}
