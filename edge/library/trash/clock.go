package trash

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// clockName is the cleaner's record, in the trash directory, of the
// latest sweep: the wall time it ran at and, where known, the boot clock
// then ("<unix ns> <boot id> <boottime ns>"). An earlier version wrote
// the wall time alone, which still reads, as a record with no boot clock.
const clockName = ".euterpe-clock"

// ErrClockSetBack is returned by a sweep that removed and marked nothing
// because the clock reads earlier than an earlier sweep's did. It wraps
// ErrClockUnsynchronized.
var ErrClockSetBack = fmt.Errorf("%w: it reads earlier than an earlier sweep's", ErrClockUnsynchronized)

// stepTolerance is how much further the wall clock may have moved than
// the boot clock between two sweeps before the difference counts as the
// clock stepped forward. Slewing (an NTP client's correction of a drift,
// at most 500 ppm) speeds or slows both clocks alike, so the difference
// grows only when the clock is stepped; steps of a few minutes are
// ordinary corrections, and what they take from a retention of days does
// not matter. A step above it is one of the steps that do (an NTP server
// serving a date months ahead) and is taken out of every entry's age.
const stepTolerance = 10 * time.Minute

// BootClock is a reading of the clock that counts the time since boot,
// suspend included, and that nothing sets: the wall clock's steps do not
// move it.
type BootClock struct {
	ID      string        // the boot's id, new at each boot
	Elapsed time.Duration // CLOCK_BOOTTIME
}

// bootIDFile holds a random id the kernel draws at each boot.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// KernelBootClock reads the boot id and CLOCK_BOOTTIME.
func KernelBootClock() (BootClock, error) {
	id, err := os.ReadFile(bootIDFile)
	if err != nil {
		return BootClock{}, fmt.Errorf("boot id: %w", err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return BootClock{}, fmt.Errorf("boot clock: %w", err)
	}
	b := BootClock{ID: strings.TrimSpace(string(id)), Elapsed: time.Duration(ts.Nano())}
	if !validBootID(b.ID) {
		return BootClock{}, fmt.Errorf("boot id %.64q: not an id", b.ID)
	}
	return b, nil
}

// validBootID accepts what can stand as one field of the clock record.
func validBootID(id string) bool {
	return id != "" && len(id) <= 64 && !strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r > '~' })
}

// clockRecord is what clockName holds.
type clockRecord struct {
	wall time.Time
	boot *BootClock // nil: not known
}

func readClock(dir *os.File) (clockRecord, bool) {
	s, ok := readSmall(dir, clockName, 256)
	if !ok {
		return clockRecord{}, false
	}
	f := strings.Fields(s)
	if len(f) != 1 && len(f) != 3 {
		return clockRecord{}, false
	}
	wall, ok := parseTime(f[0])
	if !ok {
		return clockRecord{}, false
	}
	r := clockRecord{wall: wall}
	if len(f) == 3 {
		up, err := strconv.ParseInt(f[2], 10, 64)
		if err == nil && up >= 0 && validBootID(f[1]) {
			r.boot = &BootClock{ID: f[1], Elapsed: time.Duration(up)}
		}
	}
	return r, true
}

func writeClock(dir *os.File, r clockRecord) error {
	s := strconv.FormatInt(r.wall.UnixNano(), 10)
	if r.boot != nil {
		s += " " + r.boot.ID + " " + strconv.FormatInt(int64(r.boot.Elapsed), 10)
	}
	return writeSmall(dir, clockName, s+"\n")
}

// forwardStep is how far the wall clock was stepped forward between the
// sweep recorded in r and now, read with boot: how much further it moved
// than the boot clock did. It is 0 for a step within stepTolerance, and
// when the two readings cannot be compared: either lacks the boot clock,
// or they are of different boots (the boot clock starts again at each
// boot, and the time the machine was off is real time gone by).
func (r clockRecord) forwardStep(now time.Time, boot *BootClock) time.Duration {
	if r.boot == nil || boot == nil || r.boot.ID != boot.ID || boot.Elapsed < r.boot.Elapsed {
		return 0
	}
	d := now.Sub(r.wall) - (boot.Elapsed - r.boot.Elapsed)
	if d <= stepTolerance {
		return 0
	}
	return d
}

// clocks reads the wall clock and, when it is the system's or Boot is
// set, the boot clock.
func (c *Cleaner) clocks() (time.Time, *BootClock) {
	read := c.Boot
	if read == nil && c.Now == nil {
		read = KernelBootClock
	}
	var boot *BootClock
	if read != nil {
		if b, err := read(); err == nil {
			boot = &b
		}
	}
	if c.Now != nil {
		return c.Now(), boot
	}
	return time.Now(), boot
}

// passClock reads the clocks for a sweep of dir, the trash directory, and
// records them as the latest sweep's; it returns the wall time the sweep
// judges ages by. It does all that under the trash lock, so that sweeps
// of one trash by several processes each compare with the one before.
//
// A clock that counts as synchronized can still be stepped, by an NTP
// server serving a wrong date, a GPS week rollover, or by hand. Set back
// (earlier than the latest sweep), one of its two readings is wrong and
// either way a sweep now could empty entries early, by a first sight
// marked on the earlier reading or by markers it would rewrite as lying
// in the future: it returns ErrClockSetBack, and sweeps resume once the
// clock passes the recorded time. Stepped forward in the same boot, every
// entry would look older by the step: the first sights are moved forward
// by it first (shiftMarks), so that ages count only the time that passed.
// If the step corrected a clock that was behind, that lengthens the
// retention, the safe side.
func (c *Cleaner) passClock(dir *os.File) (time.Time, error) {
	unlock, err := Lock(c.Dir)
	if err != nil {
		return time.Time{}, err
	}
	defer unlock()
	now, boot := c.clocks()
	last, ok := readClock(dir)
	if ok && now.Before(last.wall) {
		return time.Time{}, fmt.Errorf("%w (%s, before %s; remove %s if that time is the wrong one)",
			ErrClockSetBack, now.UTC().Format(time.RFC3339), last.wall.UTC().Format(time.RFC3339), clockName)
	}
	if d := last.forwardStep(now, boot); d > 0 {
		// The clock is recorded only once every marker has moved: a sweep
		// interrupted before that finds the step again and moves them all
		// once more, which again only lengthens the retention.
		if err := shiftMarks(dir, d, now); err != nil {
			return time.Time{}, fmt.Errorf("clock stepped forward %s: moving first sights: %w", d, err)
		}
		c.log().Warn("system clock stepped forward while synchronized: trash entries' ages do not count the step",
			"step", d, "last_sweep", last.wall.UTC().Format(time.RFC3339), "now", now.UTC().Format(time.RFC3339))
	}
	return now, writeClock(dir, clockRecord{wall: now, boot: boot})
}

// shiftMarks moves forward by d the start of the age of every marked
// entry in the trash (root) and in its job directories, where the markers
// are. An entry's age started at the later of its first sight and its
// mtime; its marker is rewritten to that start plus d, but never later
// than now (an mtime set after the step, or a marker already in the
// future, starts at now). A marker that does not read is left: the sweep
// marks its entry as first seen now. A job directory that does not open
// (a mount point, a symlink) is left as the sweep leaves it.
func shiftMarks(root *os.File, d time.Duration, now time.Time) error {
	jobs, err := names(root)
	if err != nil {
		return err
	}
	// The first failure stops the shift: the clock is then not recorded
	// and the next sweep shifts everything again.
	if err := shiftDir(root, jobs, d, now); err != nil {
		return err
	}
	for _, job := range jobs {
		var st unix.Stat_t
		if !digits(job) || unix.Fstatat(int(root.Fd()), job, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		jd, err := openDir(int(root.Fd()), job, false)
		if err != nil {
			continue
		}
		entries, err := names(jd)
		if err == nil {
			err = shiftDir(jd, entries, d, now)
		}
		jd.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", job, err)
		}
	}
	return nil
}

// shiftDir moves the markers among names, the listing of dir.
func shiftDir(dir *os.File, names []string, d time.Duration, now time.Time) error {
	for _, n := range names {
		entry, ok := strings.CutPrefix(n, markPrefix)
		if !ok || !digits(entry) {
			continue
		}
		seen, ok := readMark(dir, entry)
		var st unix.Stat_t
		if !ok || unix.Fstatat(int(dir.Fd()), entry, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // the sweep marks the entry anew, or drops the marker
		}
		from := seen
		if m := mtime(&st); m.After(from) && !m.After(now) {
			from = m
		}
		to := from.Add(d)
		if to.After(now) {
			to = now
		}
		if err := writeMark(dir, entry, to); err != nil {
			return fmt.Errorf("%s: %w", markName(entry), err)
		}
	}
	return nil
}
