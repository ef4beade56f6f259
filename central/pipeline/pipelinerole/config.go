package pipelinerole

import (
	"errors"
	"path/filepath"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/pipeline/objstore"
	"github.com/vesta-cx/euterpe/daemon"
)

// Config holds the pipeline settings.
type Config struct {
	Visibility     time.Duration
	Concurrency    int
	Poll           time.Duration
	MaxAttempts    int
	BackoffBase    time.Duration
	BackoffMax     time.Duration
	UpstreamWait   time.Duration
	Types          string
	TypeTimeout    time.Duration
	Storage        string
	Schedule       string
	CatchupDays    int
	Symbols        string
	EnqueueTimeout time.Duration
	AuthCache      time.Duration
}

// Defaults are the contract's values (visibility 30 s, max_attempts 5) and
// the (02:00 UTC, 7 days of catch-up).
func Defaults() Config {
	return Config{
		Visibility: 30 * time.Second, Concurrency: 4, Poll: time.Second, MaxAttempts: 5,
		BackoffBase: 5 * time.Second, BackoffMax: 5 * time.Minute, UpstreamWait: time.Hour, TypeTimeout: 10 * time.Minute,
		Schedule: "02:00", CatchupDays: 7, EnqueueTimeout: 5 * time.Second, AuthCache: 5 * time.Second,
	}
}

// Bind declares the settings on c.
func (cfg *Config) Bind(c *daemon.Config) {
	d := Defaults()
	c.Duration(&cfg.Visibility, "pipeline-visibility", "EUTERPE_PIPELINE_VISIBILITY", d.Visibility, time.Second, time.Hour,
		"visibility timeout of a claimed pipeline job (a lease, heartbeated every third)")
	c.Int(&cfg.Concurrency, "pipeline-concurrency", "EUTERPE_PIPELINE_CONCURRENCY", d.Concurrency, 1, 256, "pipeline jobs a pod runs at once")
	c.Duration(&cfg.Poll, "pipeline-poll", "EUTERPE_PIPELINE_POLL", d.Poll, 10*time.Millisecond, time.Minute, "idle poll interval of the pipeline worker (jittered)")
	c.Int(&cfg.MaxAttempts, "pipeline-max-attempts", "EUTERPE_PIPELINE_MAX_ATTEMPTS", d.MaxAttempts, 1, 100, "attempts before a pipeline job is dead-lettered")
	c.Duration(&cfg.BackoffBase, "pipeline-backoff-base", "EUTERPE_PIPELINE_BACKOFF_BASE", d.BackoffBase, time.Millisecond, time.Hour,
		"ceiling of the first retry delay of a retryable pipeline failure (exponential, full jitter)")
	c.Duration(&cfg.BackoffMax, "pipeline-backoff-max", "EUTERPE_PIPELINE_BACKOFF_MAX", d.BackoffMax, time.Millisecond, 24*time.Hour,
		"largest retry delay of a failed pipeline job (one whose data is still on its way waits EUTERPE_PIPELINE_UPSTREAM_WAIT instead)")
	c.Duration(&cfg.UpstreamWait, "pipeline-upstream-wait", "EUTERPE_PIPELINE_UPSTREAM_WAIT", d.UpstreamWait, time.Second, 24*time.Hour,
		"longest wait before retrying a job whose data is still on its way (UPSTREAM_INCOMPLETE: an edge_daily day the edge has not delivered); each wait is drawn from [half, all)")
	c.String(&cfg.Types, "pipeline-types", "EUTERPE_PIPELINE_TYPES", "", "external pipeline job types: name=exec:/path or name=http:URL, comma-separated",
		func(v string) error { _, err := pipeline.ParseTypes(v, time.Minute, nil); return err })
	c.Duration(&cfg.TypeTimeout, "pipeline-type-timeout", "EUTERPE_PIPELINE_TYPE_TIMEOUT", d.TypeTimeout, time.Second, 24*time.Hour,
		"time an exec or http pipeline job type has to answer")
	c.String(&cfg.Storage, "pipeline-storage", "EUTERPE_PIPELINE_STORAGE", "",
		"where pipeline reports go: an absolute directory or s3://bucket[/prefix]?endpoint=…&region=… (credentials: `euterpe-central pipeline storage-credentials`); empty: <state-dir>/pipeline", checkStorage)
	c.String(&cfg.Schedule, "pipeline-schedule", "EUTERPE_PIPELINE_SCHEDULE", d.Schedule, "daily pipeline slot, HH:MM UTC; asof = the day before",
		func(v string) error { _, err := pipeline.ParseSchedule(v); return err })
	c.Int(&cfg.CatchupDays, "pipeline-catchup-days", "EUTERPE_PIPELINE_CATCHUP_DAYS", d.CatchupDays, 1, 366, "missed daily slots a starting pod enqueues")
	c.String(&cfg.Symbols, "pipeline-symbols", "EUTERPE_PIPELINE_SYMBOLS", "", "symbols the scheduler enqueues daily per job type: type=SYM|SYM,type2=SYM (edge_daily: every registered edge)",
		func(v string) error { _, err := pipeline.ParseSymbols(v); return err })
	c.Duration(&cfg.EnqueueTimeout, "pipeline-enqueue-timeout", "EUTERPE_PIPELINE_ENQUEUE_TIMEOUT", d.EnqueueTimeout, 100*time.Millisecond, time.Minute,
		"how long POST /v1/pipeline/jobs retries an unreachable database before answering 503 QUEUE_UNAVAILABLE")
	c.Duration(&cfg.AuthCache, "pipeline-auth-cache", "EUTERPE_PIPELINE_AUTH_CACHE", d.AuthCache, 0, time.Minute,
		"how long /v1/pipeline remembers a verified operator token; a disabled token is refused at most this long after `operator disable` (0: look up every request)")
	c.Check(cfg.Validate)
}

// Validate checks relations between settings.
func (cfg *Config) Validate() error {
	if cfg.BackoffMax < cfg.BackoffBase {
		return &daemon.SettingError{Setting: "EUTERPE_PIPELINE_BACKOFF_MAX", Value: cfg.BackoffMax.String(), Reason: "must not be below EUTERPE_PIPELINE_BACKOFF_BASE"}
	}
	return nil
}

func checkStorage(v string) error {
	switch {
	case v == "":
		return nil
	case strings.HasPrefix(v, "s3://"):
		_, _, _, _, err := objstore.ParseS3URL(v)
		return err
	case filepath.IsAbs(v):
		return nil
	}
	return errors.New("want an absolute directory or s3://bucket[/prefix]?endpoint=…")
}

// StorageDir is the default report directory under the state directory.
func StorageDir(stateDir string) string { return filepath.Join(stateDir, "pipeline") }
