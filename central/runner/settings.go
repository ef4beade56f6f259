package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// Settings configure the runner role.
type Settings struct {
	LeaseTTL        time.Duration
	PollInterval    time.Duration
	Concurrency     int
	TempDir         string
	MaxSourceBytes  int // bytes; int is 64-bit on every supported platform
	RefreshWait     time.Duration
	FFmpeg, FFprobe string
	StorageTimeout  time.Duration
	// FetchTimeout bounds one download of the source, body included; 0
	// means no bound beyond the stall timeout.
	FetchTimeout time.Duration
	// UploadTimeout bounds one upload of an output, body included; 0
	// means no bound beyond the stall timeout.
	UploadTimeout time.Duration
	// StallTimeout is how long an attempt may go without progress (an
	// ffmpeg progress report that advanced, bytes fetched or uploaded)
	// before the runner stops renewing its lease and fails the attempt
	// with transcode_stalled. 0 means max(2×LeaseTTL, 60s).
	StallTimeout time.Duration
}

// minStallTimeout is the floor of the automatic stall timeout.
const minStallTimeout = 60 * time.Second

// Stall is the stall timeout in force: StallTimeout, or max(2×LeaseTTL,
// 60s) when it is 0.
func (s Settings) Stall() time.Duration {
	if s.StallTimeout > 0 {
		return s.StallTimeout
	}
	return max(2*s.LeaseTTL, minStallTimeout)
}

// Validate checks relations between settings: a stall timeout must be
// longer than the heartbeat interval, or a beat could never see progress.
func (s Settings) Validate() error {
	if s.StallTimeout < 0 {
		return &daemon.SettingError{Setting: "EUTERPE_RUNNER_STALL_TIMEOUT", Value: s.StallTimeout.String(), Reason: "must not be negative"}
	}
	if hb := lease.HeartbeatInterval(s.LeaseTTL); s.StallTimeout > 0 && s.StallTimeout <= hb {
		return &daemon.SettingError{Setting: "EUTERPE_RUNNER_STALL_TIMEOUT", Value: s.StallTimeout.String(),
			Reason: fmt.Sprintf("must be longer than the heartbeat interval (%s, a third of EUTERPE_RUNNER_LEASE_TTL=%s)", hb, s.LeaseTTL)}
	}
	return nil
}

// DefaultSettings are the values used when nothing is configured.
func DefaultSettings() Settings {
	return Settings{
		LeaseTTL:       30 * time.Second,
		PollInterval:   time.Second,
		Concurrency:    1,
		TempDir:        filepath.Join(os.TempDir(), "euterpe-runner"),
		MaxSourceBytes: 4 << 30,
		RefreshWait:    30 * time.Second,
		FFmpeg:         "ffmpeg",
		FFprobe:        "ffprobe",
		StorageTimeout: 30 * time.Second,
		FetchTimeout:   time.Hour,
		UploadTimeout:  time.Hour,
	}
}

// Bind declares the runner's settings on c (flags and EUTERPE_* variables)
// and returns where their values land after c.Parse.
func Bind(c *daemon.Config) *Settings {
	d := DefaultSettings()
	s := &Settings{}
	c.Duration(&s.LeaseTTL, "runner-lease-ttl", "EUTERPE_RUNNER_LEASE_TTL", d.LeaseTTL, 300*time.Millisecond, 10*time.Minute,
		"lease a runner holds on a job; heartbeats renew it every third of it")
	c.Duration(&s.PollInterval, "runner-poll-interval", "EUTERPE_RUNNER_POLL_INTERVAL", d.PollInterval, 10*time.Millisecond, time.Minute,
		"how often an idle runner looks for queued jobs (jittered ±50%)")
	c.Int(&s.Concurrency, "runner-concurrency", "EUTERPE_RUNNER_CONCURRENCY", d.Concurrency, 1, 64,
		"jobs one process transcodes at the same time")
	c.String(&s.TempDir, "runner-temp-dir", "EUTERPE_RUNNER_TEMP_DIR", d.TempDir,
		"directory for per-attempt scratch files; leftovers of dead runners are swept at start", nil)
	c.Int(&s.MaxSourceBytes, "runner-max-source-bytes", "EUTERPE_RUNNER_MAX_SOURCE_BYTES", d.MaxSourceBytes, 1, 1<<42,
		"largest source accepted, checked before download and while streaming")
	c.Duration(&s.RefreshWait, "runner-refresh-wait", "EUTERPE_RUNNER_REFRESH_WAIT", d.RefreshWait, 100*time.Millisecond, 10*time.Minute,
		"how long a runner waits for credential_version to advance after calling refresh_url")
	c.String(&s.FFmpeg, "ffmpeg", "EUTERPE_FFMPEG", d.FFmpeg, "ffmpeg program name or path", nil)
	c.String(&s.FFprobe, "ffprobe", "EUTERPE_FFPROBE", d.FFprobe, "ffprobe program name or path", nil)
	c.Duration(&s.StorageTimeout, "runner-storage-timeout", "EUTERPE_RUNNER_STORAGE_TIMEOUT", d.StorageTimeout, time.Second, 10*time.Minute,
		"how long object storage may take to start answering a request")
	c.Duration(&s.FetchTimeout, "runner-fetch-timeout", "EUTERPE_RUNNER_FETCH_TIMEOUT", d.FetchTimeout, time.Second, 24*time.Hour,
		"how long one download of a source may take, body included; a source still arriving then fails the attempt as storage_timeout (retryable)")
	c.Duration(&s.UploadTimeout, "runner-upload-timeout", "EUTERPE_RUNNER_UPLOAD_TIMEOUT", d.UploadTimeout, time.Second, 24*time.Hour,
		"how long one upload of an output may take, body included, and one copy of it to its final key; one still running then fails the attempt as storage_timeout (retryable)")
	c.Duration(&s.StallTimeout, "runner-stall-timeout", "EUTERPE_RUNNER_STALL_TIMEOUT", d.StallTimeout, 0, 24*time.Hour,
		"how long a job may make no progress (ffmpeg progress, bytes moved) before the runner gives it up as transcode_stalled; 0 means max(2×lease TTL, 60s)")
	c.Check(func() error { return s.Validate() }) // after Parse has filled s
	return s
}
