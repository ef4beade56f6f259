package trash

import (
	"errors"
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

// readMark reads the time entry name was first seen.
func readMark(dir *os.File, name string) (time.Time, bool) { return readTime(dir, markName(name)) }

// readTime reads a time the cleaner recorded in file name in dir.
func readTime(dir *os.File, name string) (time.Time, bool) {
	s, ok := readSmall(dir, name, 32)
	if !ok {
		return time.Time{}, false
	}
	return parseTime(s)
}

func parseTime(s string) (time.Time, bool) {
	ns, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// readSmall reads the first limit bytes of file name in dir, a regular
// file opened without following a link, with surrounding space trimmed.
func readSmall(dir *os.File, name string, limit int64) (string, bool) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", false
	}
	buf, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(buf)), true
}

// writeMark records now as the time entry name was first seen.
func writeMark(dir *os.File, name string, now time.Time) error {
	return writeTime(dir, markName(name), now)
}

// writeTime records now in file name in dir, replacing whatever held the
// name (never following a link, never writing through a hard link).
func writeTime(dir *os.File, name string, now time.Time) error {
	return writeSmall(dir, name, strconv.FormatInt(now.UnixNano(), 10)+"\n")
}

// writeSmall writes content to file name in dir, replacing whatever held
// the name: the name is removed and made anew, so a symlink there is not
// followed and a hard link to another file is not written through.
func writeSmall(dir *os.File, name, content string) error {
	if err := removeAt(dir, name); err != nil {
		return err
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	// Not synced: a marker lost to a power cut is written again at a later
	// sweep, which only lengthens the retention; a clock record lost to
	// one costs the next sweep only the set-back check, as after the
	// reboot that follows its boot clock gives nothing to compare with.
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
