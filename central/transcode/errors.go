package transcode

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
)

// Sentinels matched with errors.Is.
var (
	// ErrMissing: ffmpeg or ffprobe is not on PATH, or is there but
	// cannot run (see BrokenError). The machine, not the job, is at fault.
	ErrMissing = errors.New("program not found on PATH")
	// ErrInvalidMedia: ffprobe cannot read the source or it has no audio.
	ErrInvalidMedia = errors.New("invalid media")
	// ErrFailed: ffmpeg exited non-zero on a source ffprobe accepted.
	ErrFailed = errors.New("ffmpeg failed")
	// ErrLocalIO: the program failed writing to the runner's own disk
	// (full, or over quota). The machine, not the media, is at fault: a
	// retry, perhaps elsewhere, can succeed.
	ErrLocalIO = errors.New("local disk error")
	// ErrOutputHeld: the program exited 0 without completing what it was
	// asked for, while something it started outside its process group (a
	// wrapper's daemonised child, setsid) still held its output open. The
	// site's wrapper, not the media, is at fault.
	ErrOutputHeld = errors.New("program output held open after it exited")
)

// MissingError reports a program that could not be found.
type MissingError struct {
	Program string
	Err     error
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s not found on PATH: %v", e.Program, e.Err)
}

func (e *MissingError) Is(target error) bool { return target == ErrMissing }
func (e *MissingError) Unwrap() error        { return e.Err }

// BrokenError reports a program that is on PATH but cannot run: it could
// not be started (not executable, not a program this machine runs), it
// exited 126 or 127, the statuses with which the dynamic loader reports a
// missing shared library and a shell a command it cannot find or execute
// (a wrapper pointing at nothing), or it failed to answer -version (see
// Check). Such a program fails every job alike, so it counts as missing.
type BrokenError struct {
	Program  string
	ExitCode int    // the status it exited with; 0 when it did not exit with one
	Stderr   string // the tail of what it printed
	Err      error  // why it could not be started, or how it ended
}

func (e *BrokenError) Error() string {
	msg := e.Program + " cannot run"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *BrokenError) Is(target error) bool { return target == ErrMissing }
func (e *BrokenError) Unwrap() error        { return e.Err }

// RunError reports a program that ran and failed. Stderr is the tail of what
// it printed (bounded), which names the problem with the media.
type RunError struct {
	Program  string
	ExitCode int            // -1 when a signal ended the program
	Signal   syscall.Signal // the signal that ended it; 0 when it exited
	Stderr   string
	kind     error // ErrInvalidMedia, ErrFailed or ErrLocalIO
}

func (e *RunError) Error() string {
	msg := fmt.Sprintf("%s exited with status %d", e.Program, e.ExitCode)
	if e.Signal != 0 {
		msg = fmt.Sprintf("%s killed by signal %d (%s)", e.Program, int(e.Signal), e.Signal)
	}
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *RunError) Is(target error) bool { return target == e.kind }

// HeldError reports a program that exited 0 without completing what it
// was asked for (ffmpeg never reported the end of its output, ffprobe's
// answer was not a whole document) while something it started outside its
// process group still held its stdout or stderr open, past the time the
// runner waits for them. Stderr is the tail of what was read of it.
type HeldError struct {
	Program string
	Stderr  string
}

func (e *HeldError) Error() string {
	msg := e.Program + " exited 0 without completing its output while something it started outside its process group (setsid, a daemon) still held its stdout or stderr open"
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *HeldError) Is(target error) bool { return target == ErrOutputHeld }

// Unwrap gives os/exec's own report of it.
func (e *HeldError) Unwrap() error { return exec.ErrWaitDelay }

// Code is the short error code a job failure records for err, or "" when err
// is not one of this package's errors.
func Code(err error) string {
	switch {
	case errors.Is(err, ErrMissing):
		return "ffmpeg_missing"
	case errors.Is(err, ErrInvalidMedia):
		return "invalid_media"
	case errors.Is(err, ErrFailed):
		return "transcode_failed"
	case errors.Is(err, ErrLocalIO):
		return "local_io"
	case errors.Is(err, ErrOutputHeld):
		return "output_held"
	}
	return ""
}
