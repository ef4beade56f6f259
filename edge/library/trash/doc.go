// Package trash keeps the library's trash directory: the lock that
// serialises deletes moving files into it, and the cleaner that empties
// entries older than the retention. The cleaner works only through
// directory descriptors opened without following any symlink, starting at
// the trash directory itself, so nothing outside the trash is ever
// removed: a symlink found inside is unlinked, never followed.
//
// # Retention and the clock
//
// The retention is counted on a clock the cleaner can trust, so that it
// is never shorter than Retention of correct time. An entry's age runs
// from the later of its directory's mtime (set when the file is trashed)
// and the moment the cleaner first saw the entry; that moment is recorded
// in a marker the cleaner owns, .euterpe-seen-<entry>, next to the entry
// (outside it: the entry holds exactly what the delete put there, under
// any name). A device that boots with its clock behind (no RTC battery,
// before NTP) and trashes a file gives the entry an mtime far in the past;
// without the marker the first sweep after the clock is corrected would
// empty it at once.
//
// The cleaner removes and marks nothing while the system clock is not
// synchronized, and its Run logs that once (not every sweep), then once
// when it resumes. Synchronized is what timedatectl shows as "System clock
// synchronized": adjtimex reports a maximum error below 16 s, which only
// an NTP client (systemd-timesyncd, chrony, ntpd) keeps there. Where a
// sandbox denies adjtimex even for reading (systemd's ProtectClock=yes),
// the clock counts as synchronized once systemd-timesyncd has touched
// /run/systemd/timesync/synchronized since boot.
//
// A clock that counts as synchronized can still be set back (an NTP
// server serving a wrong date, as GPS week rollovers have made some do).
// The cleaner records the time of its latest sweep in .euterpe-clock in
// the trash directory, and while the clock reads earlier than that it
// removes and marks nothing (Sweep returns ErrClockSetBack): a first
// sight marked on the wrong reading, or markers rewritten because they
// seem to lie in the future, would empty entries early once the clock is
// right again. It logs that once and resumes when the clock passes the
// recorded time; a recorded time that is itself the wrong reading can be
// removed by hand.
//
// A machine with no NTP client therefore never has its trash emptied by
// default: a careful operator would rather see the trash grow (and the
// warning say why) than lose the recovery window to a clock nobody
// checked. Where the clock is right without NTP (a battery-backed RTC kept
// set by hand), Cleaner.TrustClock skips the check.
//
// A clock that counts as synchronized can also be stepped forward (a
// date months ahead): every entry would look older by the step and the
// next sweep would empty the trash. So beside the sweep's time the
// record holds the boot id and CLOCK_BOOTTIME, a clock of the time
// since boot that counts suspend and that no step moves. When the wall
// clock has moved more than ten minutes further than the boot clock
// since the latest sweep of the same boot (slewing moves both alike;
// smaller steps are routine corrections that do not matter against a
// retention of days), the difference is a step: before judging any
// entry the sweep moves the start of every entry's age forward by it,
// so ages count only time that passed, and logs the step once. If the
// step corrected a clock that was behind, that only lengthens the
// retention. A restart of the daemon within one boot keeps the check;
// across a reboot the boot clocks cannot be compared, so a step between
// the last sweep before a reboot and the first after it, or in a boot
// whose first sweep came after the step, is not seen. A record written
// by an earlier version (the time alone) gives nothing to compare with
// at its first sweep.
package trash
