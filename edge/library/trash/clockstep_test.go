package trash_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/trash"
)

// TestSweepClockSteppedBackNeverEmptiesEarly steps a clock that reports
// itself synchronized back by 40 days (an NTP server serving a wrong date,
// as GPS week rollovers have made some do) and then forward again to the
// right time. Entries trashed with the clock behind (mtime far in the
// past) must still stay their whole retention of correct time: a sweep on
// the stepped-back clock neither removes nor marks anything, and no
// earlier first sight is taken from it.
func TestSweepClockSteppedBackNeverEmptiesEarly(t *testing.T) {
	now := time.Now()
	back := now.Add(-40 * 24 * time.Hour)
	cases := []struct {
		name string
		// before: the entry exists (and is marked) before the step back;
		// else it appears while the clock is stepped back.
		before bool
		// keptUntil: the entry must still be there at this time, and
		// gone an hour after the retention has run from it.
		keptUntil time.Time
	}{
		{name: "entry first seen before the step", before: true, keptUntil: now.Add(retention - time.Hour)},
		{name: "entry appearing while the clock is behind", keptUntil: now.Add(24*time.Hour + retention - time.Hour)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.file("9/90/other.bin")
			var p string
			add := func() {
				p = f.file("1/10/a.bin")
				f.age(filepath.Join(f.trash, "1/10"), time.Unix(0, 0))
			}
			if c.before {
				add()
			}
			cl := f.cleaner()
			sweep := func(at time.Time) error {
				cl.Now = func() time.Time { return at }
				_, err := cl.Sweep(context.Background())
				return err
			}
			if err := sweep(now); err != nil {
				t.Fatal(err)
			}
			if !c.before {
				add()
			}
			if err := sweep(back); err != nil && !errors.Is(err, trash.ErrClockUnsynchronized) {
				t.Fatal(err)
			}
			if !exists(p) {
				t.Fatal("removed on the stepped-back clock")
			}
			for _, at := range []time.Time{now.Add(24 * time.Hour), c.keptUntil} {
				if err := sweep(at); err != nil {
					t.Fatal(err)
				}
				if !exists(p) {
					t.Fatalf("removed %s after the clock came back, before its retention", at.Sub(now))
				}
			}
			if err := sweep(c.keptUntil.Add(2 * time.Hour)); err != nil {
				t.Fatal(err)
			}
			if exists(p) {
				t.Fatal("kept past its retention")
			}
		})
	}
}
