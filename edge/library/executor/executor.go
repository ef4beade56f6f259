package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// Catalog is where the executor records what it observed: the scan session
// and the files a scan saw, the digest a hash produced, a file whose content
// changed under a delete, and each delete decision. It is the policy side's
// catalog (implemented by *store.Store, which owns library_files,
// scan_sessions and delete_decisions and their documented write paths,
// store.CatalogWrites); the executor never writes those tables with SQL of
// its own.
type Catalog interface {
	StartScanSession(ctx context.Context, jobID int64, roots []string) (int64, error)
	FinishScanSession(ctx context.Context, id int64, status string, c store.ScanCounts, errMsg string) error
	UpsertFiles(ctx context.Context, sessionID int64, batch []store.FileStat) (newN, changedN int64, err error)
	MarkMissing(ctx context.Context, sessionID int64, walked []store.WalkedRoot) (store.Missing, error)
	RecordHash(ctx context.Context, f store.File, algo, hashHex string) (bool, error)
	MarkNeedsHash(ctx context.Context, id int64) error
	RecordDecision(ctx context.Context, d store.Decision) error
}

var _ Catalog = (*store.Store)(nil)

// Executor claims and runs library work. Configure the fields, then call Run.
type Executor struct {
	// Store is library.db: the executor claims, heartbeats and finishes
	// leased rows in it with the §7 statements of this package, and reads
	// files and jobs from it.
	Store *store.Store
	// Catalog records scan, hash and delete results; nil means Store.
	Catalog Catalog
	Roots   *pathsafe.Roots
	Thumbs  *pathsafe.Dir
	Trash   *pathsafe.Dir
	Log     *slog.Logger

	WorkerID     string        // base identity; each claim gets a token derived from it
	LeaseTTL     time.Duration // lease length; heartbeats every third
	Poll         time.Duration // idle wait between claim attempts
	ThumbWorkers int
	// IOBytesPerSec paces thumbnail source reads through the shared
	// io_rate_limits bucket; 0 disables pacing.
	IOBytesPerSec int64
	FFmpeg        string // path of ffmpeg, "" looks it up on PATH
	FFprobe       string // path of ffprobe, "" looks it up on PATH
	// MaxPixels refuses a thumbnail source whose declared width×height
	// exceeds it, before anything is decoded (0 = DefaultMaxPixels).
	MaxPixels int64
	// ThumbTimeout bounds the ffmpeg run of one thumbnail, and its ffprobe
	// run to at most a minute (0 = DefaultThumbTimeout); past it the
	// thumbnail fails render_timeout.
	ThumbTimeout time.Duration
	Retry        lease.Backoff
	// MaxWALRetries is how many busy checkpoints are retried at the regular
	// backoff; later ones wait the backoff's larger bucket. A busy
	// checkpoint is never failed (§4.5).
	MaxWALRetries int
	// CheckpointBusyTimeout bounds how long a checkpoint waits for readers
	// before it reports busy (default 2s).
	CheckpointBusyTimeout time.Duration
	// SkipDirs are never walked by a scan (the state directory), unless
	// one holds the root being walked.
	SkipDirs []string
	// ThumbFormat and ThumbSize are the thumbnail format and size the API
	// requests (EUTERPE_LIBRARY_THUMBNAIL_FORMAT and _SIZE): ready and
	// failed rows of any other are out of every request's reach, and the
	// sweep removes them. Unset, rows are not judged by format and size.
	ThumbFormat string
	ThumbSize   int
	// ThumbSweepEvery is how often the cleanup loop sweeps the thumbnails
	// no request can reach (0 = DefaultThumbSweepEvery).
	ThumbSweepEvery time.Duration
	// StallWarn is how long a hash job may read nothing before a warning
	// names the files it is stuck on (0 = DefaultStallWarn).
	StallWarn time.Duration

	wakeOnce sync.Once
	wakeMu   sync.Mutex
	// wake is closed by Wake and replaced: every loop waiting on it
	// re-polls once, and the wake-up is then spent.
	wake chan struct{}
	// noRootLock is set once a library root refused a flock (a
	// filesystem without one), so the warning is logged once.
	noRootLock sync.Once
	// rootFlock takes the lock on a library root's descriptor, which it
	// owns (closed on failure and by the unlock); nil means
	// trash.FlockContext. Tests replace it to stand for a filesystem
	// without flock.
	rootFlock func(ctx context.Context, fd int, what string) (unlock func(), err error)
	// rename moves a file into the trash; nil means os.Rename. Tests
	// replace it to reach the cross-filesystem fallback.
	rename func(oldpath, newpath string) error
	// afterVerify, beforeFinalCheck and beforeMove, when set, are called
	// by a delete with the path of the file to delete once it is verified,
	// right before its last check (under the delete lock) and right before
	// it is moved. Tests use them to change the filesystem at those moments.
	afterVerify, beforeFinalCheck, beforeMove func(path string)
	// stagedStep, when set, is called during a move to a trash on another
	// filesystem with the staged path: "copied" once the copy is written,
	// before it is checked and the staged name unlinked; "recovering" when
	// a re-run is about to check a staged file and its copy. Tests use it
	// to change the file or stop the job at those moments.
	stagedStep func(step, path string)
	// hashChunk, when set, is called after each chunk a hash job reads
	// with the job's bytes done so far. Tests use it to observe progress.
	hashChunk func(bytesDone int64)
	// scanDir, when set, is called for each directory a scan is about to
	// list; an error it returns is taken as that directory's read error.
	// Tests use it to deny a directory as EACCES would when they run as
	// root (who reads any directory), and to hold a scan mid-walk.
	scanDir func(path string) error
	// dirDev, when set, gives the device a scan records for each directory
	// it enters instead of its lstat. Tests use it to show a directory on
	// another device, as a disk not mounted on its mount point would.
	dirDev func(path string, d fs.DirEntry) (int64, error)
	// beforeCleanRow, when set, is called by a cleanup for each thumbnail
	// row it is about to delete, with its id and cache path. Tests use it
	// to replace the row in between.
	beforeCleanRow func(id int64, path string)
	// sweepMu is held by the sweep round in progress; sweepDue is when
	// the next is due (by the monotonic clock, zero: at the first idle
	// round of the cleanup loop), and sweepCursor the last row id the
	// pass in progress has read.
	sweepMu     sync.Mutex
	sweepDue    time.Time
	sweepCursor atomic.Int64
	// sweepBatch bounds the rows of a sweep round (0 =
	// defaultThumbSweepBatch). Tests lower it.
	sweepBatch int
	// heldWarned is when each group's cleanup held back by a failing
	// delete was last logged, kept for heldWarnEvery
	// (DefaultHeldCleanupWarn; tests lower it).
	heldMu        sync.Mutex
	heldWarned    map[string]time.Time
	heldWarnEvery time.Duration
	// polled, when set, is called at the start of every round of every
	// claim loop. Tests count the rounds of an idle executor with it.
	polled func()
	// thumbStep, when set, is called by a render with its lease's context:
	// "decoded" once the Go decoder has read the source, "rendered" once the
	// picture is complete in its temp file, before it is published. Tests
	// use it to lose the lease at those moments.
	thumbStep func(ctx context.Context, step string)
}

func (x *Executor) init() {
	x.wakeOnce.Do(func() {
		x.wake = make(chan struct{})
		if x.Log == nil {
			x.Log = slog.Default()
		}
		if x.LeaseTTL <= 0 {
			x.LeaseTTL = 30 * time.Second
		}
		if x.Poll <= 0 {
			x.Poll = time.Second
		}
		if x.ThumbWorkers <= 0 {
			x.ThumbWorkers = 1
		}
		if x.Retry.Base <= 0 {
			x.Retry = lease.Backoff{Base: 2 * time.Second, Cap: 5 * time.Minute}
		}
		if x.Catalog == nil {
			x.Catalog = x.Store
		}
		if x.MaxWALRetries <= 0 {
			x.MaxWALRetries = 5
		}
	})
}

// Wake makes idle loops try to claim now (called after an enqueue).
func (x *Executor) Wake() {
	x.init()
	x.wakeMu.Lock()
	defer x.wakeMu.Unlock()
	close(x.wake)
	x.wake = make(chan struct{})
}

// wakeC is the channel the next Wake closes.
func (x *Executor) wakeC() <-chan struct{} {
	x.wakeMu.Lock()
	defer x.wakeMu.Unlock()
	return x.wake
}

// Run runs every claim loop, and the sweep of stale thumbnail temp files,
// until ctx ends, and waits for them.
func (x *Executor) Run(ctx context.Context) error {
	x.init()
	loops := []func(context.Context) (bool, error){x.RunJobOnce, x.RunCleanupOnce, x.RunWALOnce}
	for i := 0; i < x.ThumbWorkers; i++ {
		loops = append(loops, x.RunThumbnailOnce)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		x.sweepThumbTemps(ctx)
	}()
	for _, once := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.loop(ctx, once)
		}()
	}
	wg.Wait()
	return nil
}

// loop calls once until ctx ends; after a round with nothing to do, or an
// error, it waits for Poll or a wake-up.
func (x *Executor) loop(ctx context.Context, once func(context.Context) (bool, error)) {
	for ctx.Err() == nil {
		// Taken before the round, so a wake-up during it is not missed.
		woken := x.wakeC()
		if x.polled != nil {
			x.polled()
		}
		did, err := once(ctx)
		if err != nil && ctx.Err() == nil {
			x.Log.Warn("library executor", "err", err)
		}
		if did && err == nil {
			continue
		}
		t := time.NewTimer(x.Poll)
		select {
		case <-ctx.Done():
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}

// token mints the fencing token a claim is taken under: the worker id plus
// a random suffix, so two claims by one process never fence as each other.
func (x *Executor) token() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return x.WorkerID + "#" + hex.EncodeToString(b[:])
}

func (x *Executor) now() int64 { return x.Store.NowMS() }

func (x *Executor) leaseUntil(now int64) int64 { return now + x.LeaseTTL.Milliseconds() }

// claimStamp is the store time a claim stamps its lease from, and the end
// of that lease by this process's monotonic clock, for lease.Until. The
// deadline is read first and the claim statement runs after both: it can
// wait for SQLite's write lock (the busy timeout) while the lease it will
// write is already running, so Keep must not count a whole TTL from its own
// start.
func (x *Executor) claimStamp() (now int64, deadline time.Time) {
	deadline = time.Now().Add(x.LeaseTTL)
	return x.now(), deadline
}

func stale(table string, id int64) error {
	return &lease.StaleError{Table: table, ID: strconv.FormatInt(id, 10)}
}
