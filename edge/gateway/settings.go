package gateway

import (
	"fmt"
	"strconv"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
)

// Settings are the gateway's tunables, bound to EUTERPE_* variables by Declare.
type Settings struct {
	JobTTL          int           // default ttl_s of a job
	MaxJobTTL       int           // largest ttl_s a request may ask for
	MaxBodyBytes    int           // POST /v1/jobs body cap (413 above it)
	BacklogLimit    int           // undelivered+pending above which POST answers 429
	BacklogInterval time.Duration // how long a backlog measurement is reused
	RetryAfter      int           // seconds, sent with 429
	Heartbeat       time.Duration // SSE heartbeat comment period
	WriteTimeout    time.Duration // longest one SSE write (a piece of at most 64 KiB) may block before the client is dropped
	QueueMaxLen     int           // emergency XADD MAXLEN ~ on jobs:stream (0 = no trim, the default)

	// terminalGrace, when not 0, stands for the constant of that name:
	// tests lengthen it, so that a starved machine does not end a stream
	// before the terminal event they store comes.
	terminalGrace time.Duration
	// readBlock, when not 0, stands for the hub's constant of that name:
	// tests of the shutdown lengthen it, so that a stop waiting for the
	// blocking read to end shows as far longer than a busy machine's
	// stalls.
	readBlock time.Duration
}

// DefaultSettings are the values Declare starts from.
func DefaultSettings() Settings {
	return Settings{
		JobTTL: 86400, MaxJobTTL: 7 * 86400, MaxBodyBytes: 200 * 1024,
		BacklogLimit: 10000, BacklogInterval: 100 * time.Millisecond, RetryAfter: 1,
		Heartbeat: 15 * time.Second, WriteTimeout: 30 * time.Second, QueueMaxLen: 0,
	}
}

// Declare binds s to cfg.
func (s *Settings) Declare(cfg *daemon.Config) {
	d := DefaultSettings()
	cfg.Int(&s.JobTTL, "job-ttl-s", "EUTERPE_JOB_TTL_S", d.JobTTL, 1, 30*86400, "default job TTL in seconds (job hash and events stream)")
	cfg.Int(&s.MaxJobTTL, "job-max-ttl-s", "EUTERPE_JOB_MAX_TTL_S", d.MaxJobTTL, 1, 365*86400, "largest ttl_s a request may ask for")
	cfg.Int(&s.MaxBodyBytes, "max-body-bytes", "EUTERPE_MAX_BODY_BYTES", d.MaxBodyBytes, 1024, 16<<20, "POST /v1/jobs body cap in bytes (413 above)")
	cfg.Int(&s.BacklogLimit, "backlog-limit", "EUTERPE_BACKLOG_LIMIT", d.BacklogLimit, 1, 10_000_000, "queue backlog (undelivered + pending) above which POST /v1/jobs answers 429")
	cfg.Duration(&s.BacklogInterval, "backlog-check-interval", "EUTERPE_BACKLOG_CHECK_INTERVAL", d.BacklogInterval, 0, 10*time.Second, "how long one backlog measurement is reused (0 = measure on every request)")
	cfg.Int(&s.RetryAfter, "retry-after-s", "EUTERPE_RETRY_AFTER_S", d.RetryAfter, 1, 3600, "Retry-After seconds sent with 429 and with 503 while Redis is unavailable")
	cfg.Duration(&s.Heartbeat, "sse-heartbeat", "EUTERPE_SSE_HEARTBEAT", d.Heartbeat, 10*time.Millisecond, 10*time.Minute, "SSE heartbeat comment period")
	cfg.Duration(&s.WriteTimeout, "sse-write-timeout", "EUTERPE_SSE_WRITE_TIMEOUT", d.WriteTimeout, 100*time.Millisecond, 10*time.Minute, "an SSE client whose write (a piece of at most 64 KiB) stays blocked this long (it stopped reading) is dropped; it resumes with Last-Event-ID")
	cfg.Int(&s.QueueMaxLen, "queue-maxlen", "EUTERPE_QUEUE_MAXLEN", d.QueueMaxLen, 0, 100_000_000, "emergency cap on jobs:stream length (XADD MAXLEN ~); 0 = never trim (finished entries are deleted by the workers); otherwise more than twice EUTERPE_BACKLOG_LIMIT")
}

// Validate checks the relations between settings that are each in range
// already; it returns a *daemon.SettingError naming the setting to change.
func (s Settings) Validate() error {
	if s.JobTTL > s.MaxJobTTL {
		return &daemon.SettingError{Setting: "EUTERPE_JOB_TTL_S", Value: strconv.Itoa(s.JobTTL),
			Reason: fmt.Sprintf("must not exceed EUTERPE_JOB_MAX_TTL_S (%d)", s.MaxJobTTL)}
	}
	if s.QueueMaxLen != 0 && int64(s.QueueMaxLen) <= 2*int64(s.BacklogLimit) {
		return &daemon.SettingError{Setting: "EUTERPE_QUEUE_MAXLEN", Value: strconv.Itoa(s.QueueMaxLen),
			Reason: fmt.Sprintf("must be 0 (never trim) or more than twice EUTERPE_BACKLOG_LIMIT (%d): trimming drops the oldest entries, delivered or not", s.BacklogLimit)}
	}
	return nil
}
