package trash

import "golang.org/x/sys/unix"

// SetBeforeOpen installs a function the cleaner calls with an entry's path
// right before it opens or removes it.
func SetBeforeOpen(c *Cleaner, fn func(path string)) { c.beforeOpen = fn }

// MarkName is the name of the marker recording when entry was first seen.
func MarkName(entry string) string { return markName(entry) }

// ClockSynchronized is KernelClockSynchronized with adjtimex and the
// timesyncd flag file replaced.
func ClockSynchronized(adjtimex func(*unix.Timex) (int, error), flag string) bool {
	return clockSynchronized(adjtimex, flag)
}

// StepTolerance is the largest forward step of the clock that moves no
// first sight.
const StepTolerance = stepTolerance

// ClockName is the cleaner's record of its latest sweep.
const ClockName = clockName
