package runner

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/central/transcode"
	"github.com/vesta-cx/euterpe/daemon"
)

// storageClasses maps a storage failure's class to the inbox retry class.
var storageClasses = map[storage.Class]inbox.Class{
	storage.Retryable: inbox.Retryable,
	storage.Throttled: inbox.RateLimited,
	storage.Auth:      inbox.AuthExpired,
	storage.Final:     inbox.Permanent,
}

// Errors of the runner's own making.
var (
	// ErrOutputTooLarge: an output of a >1 GB source grew past 200 % of it.
	ErrOutputTooLarge = errors.New("output exceeds 200% of the source size")
	// ErrRefreshExhausted: storage kept refusing the credentials and the
	// job's refresh budget is spent (or it has no refresh_url).
	ErrRefreshExhausted = errors.New("storage credentials rejected and not refreshed")
	// ErrUploadTimeout: an output upload did not complete within
	// EUTERPE_RUNNER_UPLOAD_TIMEOUT.
	ErrUploadTimeout = errors.New("output upload not complete within EUTERPE_RUNNER_UPLOAD_TIMEOUT")
	// errCredentials: the job's sealed credentials could not be opened.
	errCredentials = errors.New("job credentials unavailable")
)

// rule is one row of the failure table: errors matching is become a job
// error of class and code. The first matching row wins.
type rule struct {
	is    error
	class inbox.Class
	code  string
}

var rules = []rule{
	{ErrOutputTooLarge, inbox.Permanent, "output_too_large"},
	{storage.ErrInvalidKey, inbox.Permanent, "invalid_output_prefix"},
	{ErrReplacesSource, inbox.Permanent, "output_replaces_source"},
	{ErrStalled, inbox.Retryable, "transcode_stalled"},
	{ErrUploadTimeout, inbox.Retryable, "storage_timeout"},
	{transcode.ErrMissing, inbox.Retryable, "ffmpeg_missing"}, // recorded by ReleaseError; no attempt spent
	{ErrRefreshExhausted, inbox.AuthExpired, "credentials_expired"},
	{errCredentials, inbox.Retryable, "credentials_unavailable"},
	{transcode.ErrInvalidMedia, inbox.Permanent, "invalid_media"},
	{transcode.ErrFailed, inbox.Permanent, "transcode_failed"},
	{transcode.ErrLocalIO, inbox.Retryable, "local_io"}, // ffmpeg's output disk full
	// The site's wrapper around ffmpeg left a holder of its output: the
	// machine, not the media, is at fault, and another pod may not be.
	{transcode.ErrOutputHeld, inbox.Retryable, "output_held"},
	{fs.ErrPermission, inbox.Retryable, "local_io"},
}

// classify turns an attempt's error into the job error the inbox records.
// The message is redacted of URL passwords and capped at 512 characters;
// nothing in it comes from credentials (storage errors never carry them).
func classify(err error) inbox.JobError {
	msg := daemon.CapMessage(daemon.RedactURL(err.Error()))
	var se *storage.Error
	if errors.As(err, &se) {
		class := storageClasses[se.Class()]
		code := se.ErrorCode()
		if errors.Is(err, ErrRefreshExhausted) {
			class, code = inbox.AuthExpired, "credentials_expired"
		}
		return inbox.JobError{Class: class, Code: code, Message: msg}
	}
	var re *transcode.RenditionError
	if errors.As(err, &re) {
		return inbox.JobError{Class: inbox.Permanent, Code: "invalid_rendition", Message: msg}
	}
	if killed(err) {
		msg = daemon.CapMessage("killed by a signal the runner did not send (out of memory?): " + msg)
		return inbox.JobError{Class: inbox.Retryable, Code: "transcode_killed", Message: msg}
	}
	for _, r := range rules {
		if errors.Is(err, r.is) {
			return inbox.JobError{Class: r.class, Code: r.code, Message: msg}
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return inbox.JobError{Class: inbox.Retryable, Code: "local_io", Message: msg}
	}
	return inbox.JobError{Class: inbox.Retryable, Code: "internal", Message: msg}
}

// infrastructure reports errors that are the machine's fault: the job is
// given back without spending an attempt.
func infrastructure(err error) bool {
	return errors.Is(err, transcode.ErrMissing)
}

// killed reports an ffmpeg or ffprobe that died of SIGKILL. The runner's
// own kills (lost lease, stall, shutdown) cancel the program's context and
// come back as that context's error, never as a RunError, so this SIGKILL
// came from outside: above all the kernel's OOM killer, which says this
// machine ran out of memory, not that the media is bad. A retry, here
// later or on another runner, can succeed. A shell wrapper (EUTERPE_FFMPEG)
// that runs ffmpeg as its child reports the child's SIGKILL as 128+9. A
// crash by any other signal (SIGSEGV on hostile media) is the media's
// doing and stays transcode_failed.
func killed(err error) bool {
	var re *transcode.RunError
	if !errors.As(err, &re) {
		return false
	}
	return re.Signal == syscall.SIGKILL || re.ExitCode == 128+int(syscall.SIGKILL)
}
