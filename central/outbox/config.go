package outbox

import (
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
)

// Config holds the dispatcher settings.
type Config struct {
	Batch        int           // events claimed per poll (contract default 10, max 25)
	Concurrency  int           // parallel sends per dispatcher (default 5)
	PollMin      time.Duration // jittered poll interval lower bound
	PollMax      time.Duration // and upper bound
	Timeout      time.Duration // per request, body included
	BackoffBase  time.Duration
	BackoffMax   time.Duration
	MaxAttempts  int           // delivery attempts before dead-letter
	MaxAge       time.Duration // event age after which a failure dead-letters
	LeaseTTL     time.Duration // delivery lease, renewed at a third
	AllowPrivate bool          // from serve.Deps.Policy (EUTERPE_WEBHOOK_ALLOW_PRIVATE, a serve setting)
}

// Defaults returns the contract's defaults.
func Defaults() Config {
	return Config{
		Batch:       10,
		Concurrency: 5,
		PollMin:     500 * time.Millisecond,
		PollMax:     1500 * time.Millisecond,
		Timeout:     15 * time.Second,
		BackoffBase: 5 * time.Second,
		BackoffMax:  time.Hour,
		MaxAttempts: 200,
		MaxAge:      72 * time.Hour,
		LeaseTTL:    time.Minute,
	}
}

// MaxBatch is the contract's ceiling on the claim batch.
const MaxBatch = 25

// Bind declares the settings on c (flags and EUTERPE_* variables); after
// c.Parse, cfg holds the values and Validate has passed for each bound.
func (cfg *Config) Bind(c *daemon.Config) {
	d := Defaults()
	c.Int(&cfg.Batch, "outbox-batch", "EUTERPE_OUTBOX_BATCH", d.Batch, 1, MaxBatch, "outbox events claimed per poll")
	c.Int(&cfg.Concurrency, "outbox-concurrency", "EUTERPE_OUTBOX_CONCURRENCY", d.Concurrency, 1, 256, "parallel webhook sends per dispatcher")
	c.Duration(&cfg.PollMin, "outbox-poll-min", "EUTERPE_OUTBOX_POLL_MIN", d.PollMin, 10*time.Millisecond, time.Minute, "lower bound of the jittered outbox poll interval")
	c.Duration(&cfg.PollMax, "outbox-poll-max", "EUTERPE_OUTBOX_POLL_MAX", d.PollMax, 10*time.Millisecond, time.Minute, "upper bound of the jittered outbox poll interval")
	c.Duration(&cfg.Timeout, "outbox-timeout", "EUTERPE_OUTBOX_TIMEOUT", d.Timeout, 100*time.Millisecond, 5*time.Minute, "webhook request timeout; any 2xx within it is delivered")
	c.Duration(&cfg.BackoffBase, "outbox-backoff-base", "EUTERPE_OUTBOX_BACKOFF_BASE", d.BackoffBase, time.Millisecond, time.Hour, "first retry delay ceiling (exponential, full jitter)")
	c.Duration(&cfg.BackoffMax, "outbox-backoff-max", "EUTERPE_OUTBOX_BACKOFF_MAX", d.BackoffMax, time.Millisecond, 7*24*time.Hour, "largest retry delay, Retry-After included")
	c.Int(&cfg.MaxAttempts, "outbox-max-attempts", "EUTERPE_OUTBOX_MAX_ATTEMPTS", d.MaxAttempts, 1, 100000, "delivery attempts before an event is dead-lettered")
	c.Duration(&cfg.MaxAge, "outbox-max-age", "EUTERPE_OUTBOX_MAX_AGE", d.MaxAge, time.Second, 365*24*time.Hour, "event age after which a failed delivery is dead-lettered")
	c.Duration(&cfg.LeaseTTL, "outbox-lease-ttl", "EUTERPE_OUTBOX_LEASE_TTL", d.LeaseTTL, 300*time.Millisecond, time.Hour, "delivery lease; renewed every third")
}

// Validate checks relations between settings that Bind's ranges cannot.
func (cfg Config) Validate() error {
	switch {
	case cfg.Batch < 1 || cfg.Batch > MaxBatch:
		return &daemon.SettingError{Setting: "EUTERPE_OUTBOX_BATCH", Value: fmt.Sprint(cfg.Batch), Reason: fmt.Sprintf("must be between 1 and %d", MaxBatch)}
	case cfg.Concurrency < 1:
		return &daemon.SettingError{Setting: "EUTERPE_OUTBOX_CONCURRENCY", Value: fmt.Sprint(cfg.Concurrency), Reason: "must be at least 1"}
	case cfg.PollMax < cfg.PollMin:
		return &daemon.SettingError{Setting: "EUTERPE_OUTBOX_POLL_MAX", Value: cfg.PollMax.String(), Reason: "must not be below EUTERPE_OUTBOX_POLL_MIN"}
	case cfg.BackoffMax < cfg.BackoffBase:
		return &daemon.SettingError{Setting: "EUTERPE_OUTBOX_BACKOFF_MAX", Value: cfg.BackoffMax.String(), Reason: "must not be below EUTERPE_OUTBOX_BACKOFF_BASE"}
	case cfg.LeaseTTL < 2*cfg.Timeout:
		return &daemon.SettingError{Setting: "EUTERPE_OUTBOX_LEASE_TTL", Value: cfg.LeaseTTL.String(), Reason: "must be at least twice EUTERPE_OUTBOX_TIMEOUT"}
	case cfg.MaxAttempts < 1:
		return &daemon.SettingError{Setting: "EUTERPE_OUTBOX_MAX_ATTEMPTS", Value: fmt.Sprint(cfg.MaxAttempts), Reason: "must be at least 1"}
	}
	return nil
}
