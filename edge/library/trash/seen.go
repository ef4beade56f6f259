package trash

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// markPrefix names the cleaner's record of when it first saw an entry:
// .euterpe-seen-<entry>, next to the entry in the same directory. It is
// kept outside the entry so that a trashed file can have any name, and
// the entry stays exactly what the delete put there. Deletes make only
// names of digits, so a marker never meets a name of theirs.
const markPrefix = ".euterpe-seen-"

func markName(entry string) string { return markPrefix + entry }

// ager decides whether an entry has been in the trash longer than the
// retention, on a clock known to be synchronized.
type ager struct {
	now       time.Time
	retention time.Duration
}

// expired reports whether entry name in dir (whose lstat is st) is older
// than the retention. Its age runs from the later of its mtime and the
// moment the cleaner first saw it; an entry seen for the first time is
// marked now and is not expired. A marker that cannot be read, or lies in
// the future, is written again: that can only lengthen the retention. An
// mtime in the future (the clock was ahead at trash time) is not used.
func (a ager) expired(dir *os.File, name string, st *unix.Stat_t) (bool, error) {
	seen, ok := readMark(dir, name)
	if !ok || seen.After(a.now) {
		return false, writeMark(dir, name, a.now)
	}
	from := seen
	if m := mtime(st); m.After(from) && !m.After(a.now) {
		from = m
	}
	return from.Before(a.now.Add(-a.retention)), nil
}

// clockName is the cleaner's record, in the trash directory, of the
// latest time a sweep ran at.
const clockName = ".euterpe-clock"

// ErrClockSetBack is returned by a sweep that removed and marked nothing
// because the clock reads earlier than an earlier sweep's did. It wraps
// ErrClockUnsynchronized.
var ErrClockSetBack = fmt.Errorf("%w: it reads earlier than an earlier sweep's", ErrClockUnsynchronized)

// passClock records now as the latest sweep's time in dir, the trash
// directory, unless an earlier sweep ran at a later time: then the clock
// was set back (a wrong date from an NTP server, a GPS week rollover, by
// hand) while it counted as synchronized, one of its two readings is
// wrong, and either way a sweep now could empty entries early, by a first
// sight marked on the earlier reading or by markers it would rewrite as
// lying in the future. Sweeps resume once the clock passes that time.
func (c *Cleaner) passClock(dir *os.File, now time.Time) error {
	unlock, err := Lock(c.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	if last, ok := readTime(dir, clockName); ok && now.Before(last) {
		return fmt.Errorf("%w (%s, before %s; remove %s if that time is the wrong one)",
			ErrClockSetBack, now.UTC().Format(time.RFC3339), last.UTC().Format(time.RFC3339), clockName)
	}
	return writeTime(dir, clockName, now)
}

// readMark reads the time entry name was first seen.
func readMark(dir *os.File, name string) (time.Time, bool) { return readTime(dir, markName(name)) }

// readTime reads a time the cleaner recorded in file name in dir, a
// regular file opened without following a link.
func readTime(dir *os.File, name string) (time.Time, bool) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return time.Time{}, false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return time.Time{}, false
	}
	buf, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(buf)), 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// writeMark records now as the time entry name was first seen.
func writeMark(dir *os.File, name string, now time.Time) error {
	return writeTime(dir, markName(name), now)
}

// writeTime records now in file name in dir, replacing whatever held the
// name (never following a link, never writing through a hard link).
func writeTime(dir *os.File, name string, now time.Time) error {
	if err := removeAt(dir, name); err != nil {
		return err
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.WriteString(strconv.FormatInt(now.UnixNano(), 10) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	// A marker lost to a power cut is written again at a later sweep,
	// which only lengthens the retention; it is not synced.
	return err
}

// dropMark removes entry name's marker.
func dropMark(dir *os.File, name string) error { return removeAt(dir, markName(name)) }

// dropMarks removes the markers among names (the listing of dir) whose
// entry is gone, or is one stale reports as not carrying a marker here.
func dropMarks(dir *os.File, names []string, stale func(*unix.Stat_t) bool) error {
	var errs []error
	for _, n := range names {
		entry, ok := strings.CutPrefix(n, markPrefix)
		if !ok || !digits(entry) {
			continue
		}
		var st unix.Stat_t
		err := unix.Fstatat(int(dir.Fd()), entry, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case errors.Is(err, unix.ENOENT), err == nil && stale != nil && stale(&st):
			if err := dropMark(dir, entry); err != nil {
				errs = append(errs, err)
			}
		case err != nil:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// timesyncFlag is touched by systemd-timesyncd each time it synchronizes
// the clock; /run is emptied at boot.
const timesyncFlag = "/run/systemd/timesync/synchronized"

// maxErrorSynced is the bound under which systemd-timedated reports the
// clock synchronized (NTPSynchronized, timedatectl's "System clock
// synchronized"): 16 s, in microseconds.
const maxErrorSynced = 16_000_000

// KernelClockSynchronized reports whether the system clock is
// synchronized, as timedatectl decides it: adjtimex's maximum error
// estimate is below 16 s. An NTP client resets that estimate each time it
// disciplines the clock, and the kernel adds 500 µs to it every second
// from 16 s at boot, so a clock no NTP client has set never counts.
// STA_UNSYNC is not used, as systemd does not use it: it can be set only
// to keep the kernel from writing the RTC. Where adjtimex itself is denied
// (a unit with ProtectClock=yes filters it even for reading), the clock
// counts as synchronized once systemd-timesyncd has touched
// /run/systemd/timesync/synchronized since boot.
func KernelClockSynchronized() bool { return clockSynchronized(unix.Adjtimex, timesyncFlag) }

func clockSynchronized(adjtimex func(*unix.Timex) (int, error), flag string) bool {
	var tx unix.Timex // modes 0: read only
	_, err := adjtimex(&tx)
	if err == nil {
		return int64(tx.Maxerror) < maxErrorSynced
	}
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EACCES) {
		return false
	}
	_, err = os.Stat(flag)
	return err == nil
}
