package trash_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesta-cx/euterpe/edge/library/trash"
)

const retention = 30 * 24 * time.Hour

var (
	old    = time.Now().Add(-31 * 24 * time.Hour)
	recent = time.Now().Add(-29 * 24 * time.Hour)
)

type fixture struct {
	t              *testing.T
	trash, outside string
}

func newFixture(t *testing.T) *fixture {
	base := t.TempDir()
	f := &fixture{t: t, trash: filepath.Join(base, "trash"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{f.trash, f.outside} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// file writes rel (under the trash unless absolute) and its parents.
func (f *fixture) file(rel string) string {
	f.t.Helper()
	p := rel
	if !filepath.IsAbs(p) {
		p = filepath.Join(f.trash, rel)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("content of "+rel), 0o640); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) link(rel, target string) string {
	f.t.Helper()
	p := filepath.Join(f.trash, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// age sets the mtime of p itself (not a symlink's target).
func (f *fixture) age(p string, at time.Time) {
	f.t.Helper()
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(at.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		f.t.Fatal(err)
	}
}

// cleaner returns a cleaner of the fixture's trash on a synchronized clock.
func (f *fixture) cleaner() *trash.Cleaner {
	return &trash.Cleaner{Dir: f.trash, Retention: retention, Synced: func() bool { return true }}
}

// seenLongAgo runs a sweep of cl as if it had run before old: every entry
// in the trash then carries a first-seen mark older than the retention,
// so the next sweep ages the entries by their mtime alone.
func (f *fixture) seenLongAgo(cl *trash.Cleaner) {
	f.t.Helper()
	saved := cl.Now
	cl.Now = func() time.Time { return old.Add(-time.Hour) }
	defer func() { cl.Now = saved }()
	if n, err := cl.Sweep(context.Background()); err != nil || n != 0 {
		f.t.Fatalf("first sweep: removed %d, %v", n, err)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func (f *fixture) intact(paths ...string) {
	f.t.Helper()
	for _, p := range paths {
		if data, err := os.ReadFile(p); err != nil || string(data) != "content of "+p {
			f.t.Fatalf("%s touched: %q %v", p, data, err)
		}
	}
}

// TestSweepRemovesOnlyOldEntriesInsideTheTrash lays out a trash with old
// and recent entries, stray names, and symlinks leading out of it in
// every position; a sweep removes exactly the old entries and never
// anything a symlink points to.
func TestSweepRemovesOnlyOldEntriesInsideTheTrash(t *testing.T) {
	f := newFixture(t)
	victim := f.file(filepath.Join(f.outside, "victim.bin"))
	outDir := filepath.Join(f.outside, "dir")
	outDirFile := f.file(filepath.Join(outDir, "inside.bin"))
	outJob := filepath.Join(f.outside, "job")
	outJobFile := f.file(filepath.Join(outJob, "40", "x.bin"))
	f.age(filepath.Join(outJob, "40"), old)

	f.file("1/10/a.bin")
	f.age(filepath.Join(f.trash, "1/10"), old)
	f.file("1/11/b.bin")
	f.age(filepath.Join(f.trash, "1/11"), recent)
	f.file("2/20/c.bin")
	f.age(filepath.Join(f.trash, "2/20"), old)
	f.file("notes.txt")
	f.age(filepath.Join(f.trash, "notes.txt"), old)
	f.file("9/readme")
	f.age(filepath.Join(f.trash, "9/readme"), old)
	// an old entry that is a symlink to a directory outside
	f.link("3/30", outDir)
	f.age(filepath.Join(f.trash, "3/30"), old)
	// a job directory that is a symlink to a directory outside
	f.link("4", outJob)
	f.age(filepath.Join(f.trash, "4"), old)
	// an old entry holding a symlink to a file outside
	f.link("5/50/link.bin", victim)
	f.age(filepath.Join(f.trash, "5/50"), old)
	// nested directories inside an old entry
	f.file("6/60/sub/deeper/d.bin")
	f.age(filepath.Join(f.trash, "6/60"), old)
	// a recent symlink job directory stays (it is not old yet)
	f.link("7", outJob)

	cl := f.cleaner()
	f.seenLongAgo(cl)
	n, err := cl.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Fatalf("removed %d entries, want 6", n)
	}
	for _, gone := range []string{"1/10", "2", "3/30", "4", "5/50", "6"} {
		if exists(filepath.Join(f.trash, gone)) {
			t.Errorf("%s still in the trash", gone)
		}
	}
	for _, kept := range []string{"1/11/b.bin", "notes.txt", "9/readme", "7"} {
		if !exists(filepath.Join(f.trash, kept)) {
			t.Errorf("%s removed", kept)
		}
	}
	f.intact(victim, outDirFile, outJobFile)
	if !exists(filepath.Join(outJob, "40")) {
		t.Fatal("directory outside the trash removed through a symlink")
	}
}

// TestSweepEntrySwappedForSymlink swaps an old entry, and a job directory,
// for a symlink to a directory outside the trash right before the
// cleaner opens it: the link is removed or the sweep refuses, and nothing
// outside is touched.
func TestSweepEntrySwappedForSymlink(t *testing.T) {
	for _, c := range []struct {
		name, swap string
		wantErr    bool
	}{
		{name: "entry directory", swap: "1/10"},
		{name: "job directory", swap: "1", wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			outFile := f.file(filepath.Join(f.outside, "dir", "10", "keep.bin"))
			f.age(filepath.Join(f.outside, "dir", "10"), old)
			f.file("1/10/a.bin")
			f.age(filepath.Join(f.trash, "1/10"), old)
			cl := f.cleaner()
			f.seenLongAgo(cl)
			swapped := false
			trash.SetBeforeOpen(cl, func(p string) {
				if p != filepath.Join(f.trash, c.swap) || swapped {
					return
				}
				swapped = true
				if err := os.RemoveAll(p); err != nil {
					t.Fatal(err)
				}
				target := filepath.Join(f.outside, "dir")
				if c.swap == "1/10" {
					target = filepath.Join(f.outside, "dir", "10")
				}
				if err := os.Symlink(target, p); err != nil {
					t.Fatal(err)
				}
			})
			_, err := cl.Sweep(context.Background())
			if !swapped {
				t.Fatal("swap hook not reached")
			}
			if (err != nil) != c.wantErr {
				t.Fatalf("sweep error %v, want error %v", err, c.wantErr)
			}
			f.intact(outFile)
		})
	}
}

func TestSweepRefusesTrashReplacedBySymlink(t *testing.T) {
	f := newFixture(t)
	outFile := f.file(filepath.Join(f.outside, "1", "10", "x.bin"))
	f.age(filepath.Join(f.outside, "1", "10"), old)
	if err := os.Rename(f.trash, f.trash+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, f.trash); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cleaner().Sweep(context.Background()); err == nil {
		t.Fatal("sweep through a symlinked trash directory")
	}
	f.intact(outFile)
}

func TestSweepRetentionZeroKeepsEverything(t *testing.T) {
	f := newFixture(t)
	p := f.file("1/10/a.bin")
	f.age(filepath.Join(f.trash, "1/10"), time.Unix(0, 0))
	cl := f.cleaner()
	cl.Retention = 0
	if n, err := cl.Sweep(context.Background()); n != 0 || err != nil {
		t.Fatalf("sweep with retention 0: %d %v", n, err)
	}
	if !exists(p) {
		t.Fatal("entry removed with retention 0")
	}
}

// TestLockExcludes: the lock is exclusive across separate opens (as two
// executors, or a delete and the cleaner, take it).
func TestLockExcludes(t *testing.T) {
	dir := t.TempDir()
	unlock, err := trash.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := false
	done := make(chan struct{})
	go func() {
		u, err := trash.Lock(dir)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		got = true
		mu.Unlock()
		u()
		close(done)
	}()
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	early := got
	mu.Unlock()
	if early {
		t.Fatal("second lock taken while the first was held")
	}
	unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("second lock never taken")
	}
	if _, err := os.Lstat(filepath.Join(dir, trash.LockName)); errors.Is(err, os.ErrNotExist) {
		t.Fatal("no lock file")
	}
}

// TestLockContextStopsWaiting: a wait for the lock held elsewhere ends
// with ctx (cancelled, or past its deadline), and the abandoned wait
// never keeps the lock: once the holder lets go, the next Lock gets it.
func TestLockContextStopsWaiting(t *testing.T) {
	cases := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			unlock, err := trash.Lock(dir)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := c.ctx()
			defer cancel()
			done := make(chan error, 1)
			go func() {
				u, err := trash.LockContext(ctx, dir)
				if err == nil {
					u()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, c.want) {
					t.Fatalf("LockContext: %v, want %v", err, c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("LockContext still waiting after its context ended")
			}
			unlock()
			got := make(chan struct{})
			go func() {
				if u, err := trash.Lock(dir); err == nil {
					u()
				}
				close(got)
			}()
			select {
			case <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("lock kept by an abandoned wait")
			}
		})
	}
}
