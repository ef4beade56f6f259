package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/ship"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// syncSettings configure sync to central; EUTERPE_SYNC_URL empty is off.
type syncSettings struct {
	URL        string
	EdgeID     string
	Secret     string
	SpoolMaxMB int
	BackoffMax time.Duration
	Heartbeat  time.Duration
	// YieldPace and YieldCeiling keep the shipper out of the workers' way.
	YieldPace    time.Duration
	YieldCeiling int
	// RedisMaxEvents caps the capture stream in Redis (jobs.Store.CaptureMax).
	RedisMaxEvents int

	secret []byte // read by validate
}

// defaultSpoolMaxMB is EUTERPE_SYNC_SPOOL_MAX_MB's default, which the
// sync quarantine commands share.
const defaultSpoolMaxMB = 512

var edgeIDRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func (s *syncSettings) register(c *daemon.Config) {
	c.String(&s.URL, "sync-url", "EUTERPE_SYNC_URL", "",
		"central's base URL to ship job events to (https://…); empty turns sync off and the edge works alone", checkSyncURL, daemon.Secret())
	c.String(&s.EdgeID, "sync-edge-id", "EUTERPE_SYNC_EDGE_ID", "",
		"this edge's id on central, as printed by `euterpe-central edge register`", nil)
	// Like every secret setting, the secret may also come from
	// EUTERPE_SYNC_SECRET_FILE (mode 0600) or a systemd credential
	// (euterpe_sync_secret), which is how it should be given.
	c.String(&s.Secret, "sync-secret", "EUTERPE_SYNC_SECRET", "",
		"the edge's sync secret, as printed by `euterpe-central edge register`; give it as EUTERPE_SYNC_SECRET_FILE (mode 0600) or a credential", nil, daemon.Secret())
	c.Int(&s.SpoolMaxMB, "sync-spool-max-mb", "EUTERPE_SYNC_SPOOL_MAX_MB", defaultSpoolMaxMB, 1, 1<<20,
		"budget of the on-disk sync spool (sync.db); when full the oldest delta events are dropped and reported to central as gaps")
	c.Duration(&s.BackoffMax, "sync-backoff-max", "EUTERPE_SYNC_BACKOFF_MAX", 5*time.Minute, time.Second, 24*time.Hour,
		"longest wait between attempts to reach central (exponential backoff with jitter); also the retry period after central refuses the edge's credentials")
	c.Duration(&s.Heartbeat, "sync-heartbeat", "EUTERPE_SYNC_HEARTBEAT", 30*time.Second, time.Second, time.Hour,
		"how often the edge reports its status to central")
	c.Duration(&s.YieldPace, "sync-yield-pace", "EUTERPE_SYNC_YIELD_PACE", ship.DefaultYieldPace, 0, time.Minute,
		"while jobs are queued or running, the sync mover and sender each take one batch (≤ 500 events) per this period and catch up at full speed when the edge is idle; 0 never yields")
	c.Int(&s.YieldCeiling, "sync-yield-ceiling", "EUTERPE_SYNC_YIELD_CEILING", ship.DefaultYieldCeiling, 1000, 10_000_000,
		"captured events waiting in Redis (sync:events) past which the sync mover moves at full speed even while jobs run, bounding Redis memory")
	c.Int(&s.RedisMaxEvents, "sync-redis-max-events", "EUTERPE_SYNC_REDIS_MAX_EVENTS", 0, 0, 1_000_000_000,
		"hard cap on captured events waiting in Redis (sync:events), above EUTERPE_SYNC_YIELD_CEILING (0: ten times it, 1,000,000 by default): at the cap delta events are not captured (the job's own stream keeps them) and are reported to central as gaps; lifecycle and terminal events are always captured")
}

// redisCapPerCeiling makes the default cap ten times the yield ceiling:
// about 220 MB of Redis memory with ~100-byte deltas at the default
// ceiling, reached only when the mover cannot write the spool (a full
// disk) or keep up for hours. Derived rather than fixed, so an edge whose
// ceiling was raised before the cap existed still starts.
const redisCapPerCeiling = 10

func checkSyncURL(v string) error {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http:// or https:// base URL")
	}
	if u.User != nil {
		return errors.New("must not carry credentials; the edge signs with EUTERPE_SYNC_SECRET_FILE")
	}
	// The shipper appends its paths to a base URL; a query would be lost
	// on the way and, holding a token, would reach the start-up log.
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return errors.New("want a base URL without a query or fragment; the edge signs with EUTERPE_SYNC_SECRET_FILE")
	}
	return nil
}

// validate checks the settings together and reads the secret, so a bad
// secret file stops the daemon at start with one line naming the setting.
func (s *syncSettings) validate() error {
	if s.URL == "" {
		return nil
	}
	if s.RedisMaxEvents == 0 {
		s.RedisMaxEvents = redisCapPerCeiling * s.YieldCeiling
	}
	switch {
	case s.RedisMaxEvents <= s.YieldCeiling:
		// At or under the ceiling the cap would drop deltas while the
		// mover still yields to the workers, with the spool's room unused.
		return &daemon.SettingError{Setting: "EUTERPE_SYNC_REDIS_MAX_EVENTS", Value: fmt.Sprint(s.RedisMaxEvents),
			Reason: fmt.Sprintf("must be above EUTERPE_SYNC_YIELD_CEILING (%d)", s.YieldCeiling)}
	case !edgeIDRe.MatchString(s.EdgeID):
		return &daemon.SettingError{Setting: "EUTERPE_SYNC_EDGE_ID", Value: s.EdgeID,
			Reason: "required when EUTERPE_SYNC_URL is set: 1-128 characters of [A-Za-z0-9._:-]"}
	case s.Secret != "":
		s.secret = []byte(s.Secret)
	default:
		return &daemon.SettingError{Setting: "EUTERPE_SYNC_SECRET_FILE", Value: "",
			Reason: "required when EUTERPE_SYNC_URL is set (or EUTERPE_SYNC_SECRET, or the credential euterpe_sync_secret)"}
	}
	return nil
}

func init() {
	s := &syncSettings{}
	register(Plugin{
		Name:     "sync",
		Settings: s.register,
		Validate: func(DaemonSettings) error { return s.validate() },
		Build: func(ctx context.Context, d Deps) (Component, error) {
			if s.URL == "" {
				return idleComponent{}, nil
			}
			return buildSync(ctx, d, s)
		},
	})
}

func buildSync(ctx context.Context, d Deps, s *syncSettings) (Component, error) {
	path := filepath.Join(d.StateDir, spool.File)
	// The shipper opens the spool when it runs, retrying while it cannot
	// (a full disk, a read-only state directory): the gateway and the
	// workers do not need it, and their events wait in Redis meanwhile.
	open := func(ctx context.Context) (*spool.Spool, error) {
		if err := os.MkdirAll(d.StateDir, 0o750); err != nil {
			return nil, fmt.Errorf("state directory: %w", err)
		}
		return spool.Open(ctx, path, int64(s.SpoolMaxMB)<<20)
	}
	log := d.Log.With("component", "sync")
	sh, err := ship.NewOpening(log, d.Redis, open, ship.Config{
		URL: s.URL, EdgeID: s.EdgeID, Secret: s.secret, BackoffMax: s.BackoffMax, Heartbeat: s.Heartbeat,
		YieldPace: yieldPace(s.YieldPace), YieldCeiling: int64(s.YieldCeiling),
		Status: func(ctx context.Context) wire.Status { return edgeStatus(ctx, d.Redis, d.Jobs, d.Parts) },
	})
	if err != nil {
		return nil, err
	}
	for _, c := range sh.Collectors() {
		if err := d.Metrics.Register(c); err != nil {
			return nil, fmt.Errorf("sync metrics: %w", err)
		}
	}
	// From here on every event the gateway and the workers write is
	// captured: the store is shared and nothing runs yet.
	d.Jobs.Capture = jobs.CaptureStream
	d.Jobs.CaptureMax = int64(s.RedisMaxEvents)
	log.Info("sync to central on", "url", s.URL, "edge_id", s.EdgeID, "spool", path, "spool_max_mb", s.SpoolMaxMB, "redis_max_events", s.RedisMaxEvents)
	return &syncComponent{sh: sh}, nil
}

// yieldPace maps the setting's 0 (never yield) to the shipper's negative.
func yieldPace(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// syncComponent runs the shipper, which opens the spool and closes it
// when it stops; it adds no route and no /ready check: the edge serves
// while central is unreachable or the spool cannot be opened.
type syncComponent struct {
	sh *ship.Shipper
}

func (c *syncComponent) Mount(*echo.Echo) {}

func (c *syncComponent) Run(ctx context.Context) error { return c.sh.Run(ctx) }

// idleComponent stands in for a plugin that is off.
type idleComponent struct{}

func (idleComponent) Mount(*echo.Echo) {}

func (idleComponent) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// edgeStatus gathers the heartbeat's edge-wide figures; one that cannot be
// read is reported as 0 rather than holding the heartbeat back. The
// heartbeat runs once the daemon runs, after every plugin was built, so
// parts is complete and no longer written.
func edgeStatus(ctx context.Context, rdb redis.UniversalClient, st *jobs.Store, parts *Parts) wire.Status {
	s := wire.Status{Version: daemon.Version}
	if len(s.Version) > 128 {
		s.Version = s.Version[:128]
	}
	s.Workers = parts.Workers
	if n, err := st.Backlog(ctx, 1_000_000); err == nil {
		s.Backlog = n
	}
	if p, err := rdb.XPending(ctx, jobs.QueueStream, jobs.Group).Result(); err == nil {
		s.Pending = p.Count
	}
	if n, err := rdb.XLen(ctx, jobs.DeadStream).Result(); err == nil {
		s.DeadLetters = n
	}
	if l := parts.library(); l != nil {
		var ls wire.LibraryStatus
		db := l.Store.DB
		if db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size_bytes), 0) FROM library_files WHERE is_missing = 0`).Scan(&ls.Files, &ls.Bytes) == nil &&
			db.QueryRowContext(ctx, `SELECT COUNT(*) FROM dedup_groups WHERE file_count > 1`).Scan(&ls.DuplicateGroups) == nil {
			s.Library = &ls
		}
	}
	return s
}
