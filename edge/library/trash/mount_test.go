package trash_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/trash"
)

// TestSweepNeverCrossesMountPoint mounts a directory from outside the
// trash (a bind mount: the same filesystem, so no device number tells it
// apart) inside an old entry, over an old entry, and over a job
// directory. The sweep must not empty what is mounted there: a symlink is
// not the only way out of the trash. It runs as root in a child test
// process inside a private mount namespace.
func TestSweepNeverCrossesMountPoint(t *testing.T) {
	testsvc.InMountNamespace(t, mountCases)
}

func mountCases(t *testing.T) {
	for _, c := range []struct {
		name string
		// at is where, under the trash, the outside directory is mounted.
		at string
	}{
		{"inside an old entry", "1/10/sub"},
		{"over an old entry", "1/10"},
		{"over a job directory", "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			outFile := f.file(filepath.Join(f.outside, "10", "keep.bin"))
			f.age(filepath.Join(f.outside, "10"), old)
			f.file("1/10/sub/a.bin")
			f.age(filepath.Join(f.trash, "1/10"), old)
			f.age(f.outside, old)
			target := filepath.Join(f.trash, c.at)
			if err := syscall.Mount(f.outside, target, "", syscall.MS_BIND, ""); err != nil {
				t.Fatalf("bind mount: %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(target, syscall.MNT_DETACH) })
			// The first sweep, long ago, marks what it sees; the second
			// finds it old.
			cl := f.cleaner()
			cl.Now = func() time.Time { return old.Add(-time.Hour) }
			_, _ = cl.Sweep(context.Background())
			cl.Now = nil
			_, _ = cl.Sweep(context.Background())
			for _, p := range []string{filepath.Join(f.outside, trash.MarkName("10")), filepath.Join(f.outside, "10", trash.MarkName("keep.bin"))} {
				if exists(p) {
					t.Fatalf("marker written outside the trash: %s", p)
				}
			}
			f.intact(outFile)
			if err := syscall.Unmount(target, 0); err != nil {
				t.Fatal(err)
			}
			f.intact(outFile)
		})
	}
}

// TestSweepClockStepNeverCrossesMountPoint: moving first sights after a
// forward step of the clock does not write markers through a mount point
// inside the trash, and a mount point it cannot enter does not keep it
// from moving the others.
func TestSweepClockStepNeverCrossesMountPoint(t *testing.T) {
	testsvc.InMountNamespace(t, mountStepCases)
}

func mountStepCases(t *testing.T) {
	for _, at := range []string{"1/10/sub", "1/10", "1"} {
		t.Run(at, func(t *testing.T) {
			f := newFixture(t)
			outFile := f.file(filepath.Join(f.outside, "10", "keep.bin"))
			f.file("1/10/sub/a.bin")
			other := f.file("2/20/b.bin")
			f.age(filepath.Join(f.trash, "2/20"), time.Unix(0, 0))
			target := filepath.Join(f.trash, at)
			if err := syscall.Mount(f.outside, target, "", syscall.MS_BIND, ""); err != nil {
				t.Fatalf("bind mount: %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(target, syscall.MNT_DETACH) })
			k := newTestClocks()
			cl := k.cleaner(f, nil)
			_, _ = cl.Sweep(context.Background())
			mark := filepath.Join(f.trash, "2", trash.MarkName("20"))
			seen := readNS(t, mark)
			k.pass(time.Hour)
			k.step(60 * 24 * time.Hour)
			// A second sweep finds the step recorded, not to be taken out
			// again.
			for range 2 {
				_, _ = cl.Sweep(context.Background())
				k.pass(time.Hour)
			}
			if !exists(other) {
				t.Fatal("entry beside the mount point emptied at the step")
			}
			if got := readNS(t, mark); got.Sub(seen) != 60*24*time.Hour {
				t.Fatalf("first sight beside the mount point moved by %s", got.Sub(seen))
			}
			for _, p := range []string{filepath.Join(f.outside, trash.MarkName("10")), filepath.Join(f.outside, "10", trash.MarkName("keep.bin"))} {
				if exists(p) {
					t.Fatalf("marker written outside the trash: %s", p)
				}
			}
			f.intact(outFile)
		})
	}
}
