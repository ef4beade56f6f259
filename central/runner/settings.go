package runner

import (
	"os"
	"path/filepath"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
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
	return s
}
