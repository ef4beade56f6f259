package worker

import (
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/backend"
)

// Settings configure a Pool. Register binds them to EUTERPE_* variables.
type Settings struct {
	// Concurrency is how many jobs run at once in this process.
	Concurrency int
	// Batch is the most messages read (XREADGROUP COUNT) or written in one
	// pipelined round trip.
	Batch int
	// ClaimIdle is how long a pending message must be idle before another
	// consumer claims it; in-flight messages are refreshed at a third of it.
	ClaimIdle time.Duration
	// ClaimInterval is how often pending messages are scanned for recovery.
	ClaimInterval time.Duration
	// MaxDeliveries: a message delivered more often is dead-lettered.
	MaxDeliveries int
	// ClaimFallback forces XPENDING+XCLAIM even where XAUTOCLAIM exists.
	ClaimFallback bool
	// CancelPoll is the period of the status poll that backs up the cancel
	// pub/sub channel.
	CancelPoll time.Duration
	// DeltaInterval and DeltaBytes bound how long and how much streamed text
	// is held before one "delta" event is written.
	DeltaInterval time.Duration
	DeltaBytes    int
	// Drain is how long in-flight jobs may continue after shutdown begins;
	// jobs still running then are abandoned unacknowledged and recovered.
	Drain time.Duration
	// DeadMaxLen trims jobs:dead approximately to this many entries.
	DeadMaxLen int
	// ConsumerMaxIdle: a consumer of the group idle this long with no
	// pending entries is deleted (never this pool's own).
	ConsumerMaxIdle time.Duration
	// PruneInterval is how often idle consumers are looked for.
	PruneInterval time.Duration
	// Block is how long one XREADGROUP waits for new messages; it bounds how
	// quickly the reader notices shutdown.
	Block time.Duration

	Backend backend.Config
}

// DefaultSettings are the values Register declares as defaults.
func DefaultSettings() Settings {
	return Settings{
		Concurrency:     4,
		Batch:           64,
		ClaimIdle:       30 * time.Second,
		ClaimInterval:   5 * time.Second,
		MaxDeliveries:   5,
		CancelPoll:      500 * time.Millisecond,
		DeltaInterval:   100 * time.Millisecond,
		DeltaBytes:      1024,
		Drain:           5 * time.Second,
		DeadMaxLen:      10000,
		Block:           time.Second,
		ConsumerMaxIdle: 24 * time.Hour,
		PruneInterval:   time.Hour,
		Backend:         backend.Config{LLMTimeout: 10 * time.Minute, Timeout: time.Minute},
	}
}

// Register declares the worker and backend settings on c, so the serve
// command lists and validates them with the rest.
func (s *Settings) Register(c *daemon.Config) {
	d := DefaultSettings()
	c.Int(&s.Concurrency, "workers", "EUTERPE_WORKERS", d.Concurrency, 1, 1024,
		"jobs run at once by this process (0 workers is not allowed; stop the daemon instead)")
	c.Int(&s.Batch, "worker-batch", "EUTERPE_WORKER_BATCH", d.Batch, 1, 1000,
		"most queue messages read or finished per Redis round trip")
	c.Duration(&s.ClaimIdle, "claim-idle", "EUTERPE_CLAIM_IDLE", d.ClaimIdle, time.Second, 24*time.Hour,
		"a pending message idle this long is claimed from its (presumed dead) consumer")
	c.Duration(&s.ClaimInterval, "claim-interval", "EUTERPE_CLAIM_INTERVAL", d.ClaimInterval, 100*time.Millisecond, time.Hour,
		"how often pending messages are scanned for recovery")
	c.Int(&s.MaxDeliveries, "max-deliveries", "EUTERPE_MAX_DELIVERIES", d.MaxDeliveries, 1, 1000,
		"a message delivered more times than this is dead-lettered to jobs:dead")
	c.Bool(&s.ClaimFallback, "claim-fallback", "EUTERPE_CLAIM_FALLBACK", false,
		"use XPENDING+XCLAIM for recovery even when the server has XAUTOCLAIM (Redis >= 6.2)")
	c.Duration(&s.CancelPoll, "cancel-poll", "EUTERPE_CANCEL_POLL", d.CancelPoll, 50*time.Millisecond, 10*time.Second,
		"status poll period backing up the cancel pub/sub channel")
	c.Duration(&s.DeltaInterval, "delta-interval", "EUTERPE_DELTA_INTERVAL", d.DeltaInterval, time.Millisecond, 10*time.Second,
		"longest streamed text is held before a delta event is written")
	c.Int(&s.DeltaBytes, "delta-bytes", "EUTERPE_DELTA_BYTES", d.DeltaBytes, 1, 1<<20,
		"streamed text held before a delta event is written at once")
	c.Duration(&s.Drain, "worker-drain", "EUTERPE_WORKER_DRAIN", d.Drain, 0, 10*time.Minute,
		"how long running jobs may finish after shutdown begins (keep below EUTERPE_SHUTDOWN_GRACE)")
	c.Int(&s.DeadMaxLen, "dead-maxlen", "EUTERPE_DEAD_MAXLEN", d.DeadMaxLen, 1, 100_000_000,
		"jobs:dead is trimmed to about this many entries")
	c.Duration(&s.ConsumerMaxIdle, "consumer-max-idle", "EUTERPE_CONSUMER_MAX_IDLE", d.ConsumerMaxIdle, time.Hour, 365*24*time.Hour,
		"a consumer of the group idle this long with no pending entries is deleted (never this process's own)")
	s.Block = d.Block
	s.PruneInterval = d.PruneInterval
	s.Backend.Register(c)
}

// Validate checks the worker settings against each other and against the
// daemon-wide ones they depend on: grace is EUTERPE_SHUTDOWN_GRACE, jobTTL
// the default job TTL (EUTERPE_JOB_TTL_S). It returns a
// *daemon.SettingError naming the setting to change.
func (s Settings) Validate(grace, jobTTL time.Duration) error {
	if s.Drain > 0 && s.Drain >= grace {
		return &daemon.SettingError{Setting: "EUTERPE_WORKER_DRAIN", Value: s.Drain.String(),
			Reason: fmt.Sprintf("must be less than EUTERPE_SHUTDOWN_GRACE (%s), or the daemon stops before running jobs drain", grace)}
	}
	if jobTTL > 0 && s.ClaimIdle >= jobTTL {
		return &daemon.SettingError{Setting: "EUTERPE_CLAIM_IDLE", Value: s.ClaimIdle.String(),
			Reason: fmt.Sprintf("must be less than EUTERPE_JOB_TTL_S (%s), or a crashed worker's jobs expire before they are recovered", jobTTL)}
	}
	return nil
}
