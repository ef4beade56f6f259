package library

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// Settings configure the library; Register binds them to a daemon.Config.
type Settings struct {
	Roots              string // comma-separated absolute directories
	HashAlgorithm      string
	ThumbFormat        string
	ThumbSize          int
	ThumbQueueCapacity int
	ThumbWorkers       int
	ThumbMaxAttempts   int
	ThumbMaxPixels     int // sources declaring more width×height pixels are refused before decoding
	ThumbTimeout       time.Duration
	IOBytesPerSec      int // thumbnail source bytes per second, 0 = unpaced
	WALThresholdMB     int
	WALMode            string
	TrashDir           string // "" = <state>/trash
	TrashRetention     time.Duration
	TrashTrustClock    bool
	LeaseTTL           time.Duration
	Poll               time.Duration
	PolicyInterval     time.Duration
	WatchDebounce      time.Duration
	Watch              bool
	AutoHash           bool
	CleanupDelay       time.Duration
	MaxJobRetries      int
}

func checkRoots(v string) error {
	for _, r := range RootList(v) {
		if !filepath.IsAbs(r) {
			return fmt.Errorf("root %q is not an absolute path", r)
		}
	}
	return nil
}

// RootList splits the comma-separated roots setting. The roots are left
// as written, not cleaned: a ".." after a symlink leads where the kernel
// walks the symlink first (pathsafe.NewRoots resolves them so), which
// filepath.Clean would change.
func RootList(v string) []string {
	var out []string
	for _, r := range strings.Split(v, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// Register declares every library setting on cfg.
func (s *Settings) Register(cfg *daemon.Config) {
	cfg.String(&s.Roots, "library-roots", "EUTERPE_LIBRARY_ROOTS", "",
		"comma-separated library root directories to scan (empty disables the library's scans)", checkRoots)
	cfg.String(&s.HashAlgorithm, "library-hash", "EUTERPE_LIBRARY_HASH", HashAuto,
		"content hash of library files: blake3, sha256 or auto (the catalog's own; a new catalog: sha256 on arm64 with SHA-2 instructions, blake3 elsewhere)",
		daemon.CheckOneOf(store.AlgoBLAKE3, store.AlgoSHA256, HashAuto))
	cfg.String(&s.ThumbFormat, "library-thumbnail-format", "EUTERPE_LIBRARY_THUMBNAIL_FORMAT", store.FormatJPEG,
		"thumbnail output format: jpeg or webp (webp is encoded by ffmpeg/libwebp)", daemon.CheckOneOf(store.FormatJPEG, store.FormatWebP))
	cfg.Int(&s.ThumbSize, "library-thumbnail-size", "EUTERPE_LIBRARY_THUMBNAIL_SIZE", 320, 16, 4096,
		"thumbnail bounding box in pixels (longest side)")
	cfg.Int(&s.ThumbQueueCapacity, "library-thumbnail-queue", "EUTERPE_LIBRARY_THUMBNAIL_QUEUE", 256, 1, 1_000_000,
		"maximum pending+running thumbnails; admission beyond it answers 429")
	cfg.Int(&s.ThumbWorkers, "library-thumbnail-workers", "EUTERPE_LIBRARY_THUMBNAIL_WORKERS", 2, 1, 64,
		"concurrent thumbnail renderers")
	cfg.Int(&s.ThumbMaxAttempts, "library-thumbnail-attempts", "EUTERPE_LIBRARY_THUMBNAIL_ATTEMPTS", 5, 1, 100,
		"failed thumbnails are requeued (after retry_after) until this many failures")
	cfg.Int(&s.ThumbMaxPixels, "library-thumbnail-max-pixels", "EUTERPE_LIBRARY_THUMBNAIL_MAX_PIXELS", 100_000_000, 1024, 1<<40,
		"thumbnail sources whose declared width×height exceeds this are refused (source_too_large) before decoding")
	cfg.Duration(&s.ThumbTimeout, "library-thumbnail-timeout", "EUTERPE_LIBRARY_THUMBNAIL_TIMEOUT", 2*time.Minute, time.Second, time.Hour,
		"longest ffmpeg run for one thumbnail (ffprobe: at most a minute); it is then killed and the thumbnail fails render_timeout")
	cfg.Int(&s.IOBytesPerSec, "library-io-rate", "EUTERPE_LIBRARY_IO_RATE", 64<<20, 0, 1<<40,
		"global thumbnail source read budget in bytes/s shared through io_rate_limits (0 = unpaced)")
	cfg.Int(&s.WALThresholdMB, "library-wal-threshold-mb", "EUTERPE_LIBRARY_WAL_THRESHOLD_MB", 64, 0, 1<<20,
		"schedule a WAL checkpoint when library.db-wal exceeds this many MiB (0 = never)")
	cfg.String(&s.WALMode, "library-wal-mode", "EUTERPE_LIBRARY_WAL_MODE", store.ModeTruncate,
		"checkpoint mode scheduled on WAL growth: passive, restart or truncate",
		daemon.CheckOneOf(store.ModePassive, store.ModeRestart, store.ModeTruncate))
	cfg.String(&s.TrashDir, "library-trash-dir", "EUTERPE_LIBRARY_TRASH_DIR", "",
		"where deleted duplicates are moved (default <state dir>/trash; must be inside the state directory)", nil)
	cfg.Duration(&s.TrashRetention, "library-trash-retention", "EUTERPE_LIBRARY_TRASH_RETENTION", 30*24*time.Hour, 0, 100*365*24*time.Hour,
		"trash entries older than this are removed (checked hourly; 0 keeps the trash forever)")
	cfg.Bool(&s.TrashTrustClock, "library-trash-trust-clock", "EUTERPE_LIBRARY_TRASH_TRUST_CLOCK", false,
		"empty the trash even when the kernel does not report the clock synchronized (for a clock kept right without NTP)")
	cfg.Duration(&s.LeaseTTL, "library-lease-ttl", "EUTERPE_LIBRARY_LEASE_TTL", 30*time.Second, time.Second, time.Hour,
		"lease length of library jobs; heartbeats every third")
	cfg.Duration(&s.Poll, "library-poll", "EUTERPE_LIBRARY_POLL", time.Second, 10*time.Millisecond, time.Minute,
		"idle wait between claim attempts of the executor")
	cfg.Duration(&s.PolicyInterval, "library-policy-interval", "EUTERPE_LIBRARY_POLICY_INTERVAL", 2*time.Second, 10*time.Millisecond, time.Hour,
		"how often recovery, requeueing and WAL checks run")
	cfg.Duration(&s.WatchDebounce, "library-watch-debounce", "EUTERPE_LIBRARY_WATCH_DEBOUNCE", 3*time.Second, 10*time.Millisecond, time.Hour,
		"quiet period after filesystem events before a scan is requested (events that never stop delay it by at most ten quiet periods, within 1-10 minutes)")
	cfg.Bool(&s.Watch, "library-watch", "EUTERPE_LIBRARY_WATCH", true, "watch the roots with inotify and rescan on changes")
	cfg.Bool(&s.AutoHash, "library-auto-hash", "EUTERPE_LIBRARY_AUTO_HASH", true, "enqueue a hash job after each completed scan")
	cfg.Duration(&s.CleanupDelay, "library-cleanup-delay", "EUTERPE_LIBRARY_CLEANUP_DELAY", time.Minute, 0, 24*time.Hour,
		"delay between a duplicate deletion and the cleanup of its group's thumbnails")
	cfg.Int(&s.MaxJobRetries, "library-job-retries", "EUTERPE_LIBRARY_JOB_RETRIES", 5, 0, 100,
		"retries of a scan or hash job whose lease expired before it is failed; 0 fails it at its first recovery (a delete is retried until it ends: only it can finish or undo what it began)")
}

// Defaults returns Settings with every default applied (for tests and
// embedding without flags).
func Defaults() Settings {
	var s Settings
	s.Register(daemon.NewConfig("defaults", func(string) string { return "" }))
	return s
}

var errTrashOutside = errors.New("trash directory must be inside the state directory")
