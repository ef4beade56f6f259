package executor

import (
	"context"
	"io/fs"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/vesta-cx/euterpe/edge/library/filehash"
)

// SetRename replaces the function that moves files into the trash.
func SetRename(x *Executor, rename func(oldpath, newpath string) error) { x.rename = rename }

// SetRootFlock replaces the function a delete locks each library root
// with (trash.FlockContext); it owns the descriptor it is given.
func SetRootFlock(x *Executor, fn func(ctx context.Context, fd int, what string) (func(), error)) {
	x.rootFlock = fn
}

// SetDeleteHooks installs functions a delete calls right before its last
// check of a file to delete and right before it moves it.
func SetDeleteHooks(x *Executor, beforeFinalCheck, beforeMove func(path string)) {
	x.beforeFinalCheck, x.beforeMove = beforeFinalCheck, beforeMove
}

// SetStagedStep installs a function a delete to a trash on another
// filesystem calls at each step named in Executor.stagedStep.
func SetStagedStep(x *Executor, fn func(step, path string)) { x.stagedStep = fn }

// SetAfterVerify installs a function a delete calls once a file to delete
// is verified, before it takes the delete lock.
func SetAfterVerify(x *Executor, fn func(path string)) { x.afterVerify = fn }

// SetHeldCleanupWarn sets how often a cleanup held back by a failing
// delete is logged again for its group.
func SetHeldCleanupWarn(x *Executor, every time.Duration) { x.heldWarnEvery = every }

// SetScanDir installs a function a scan calls for each directory before it
// lists it; its error stands for the directory's read error.
func SetScanDir(x *Executor, fn func(path string) error) { x.scanDir = fn }

// SetDirDevice installs the function a scan asks for the device of each
// directory it enters.
func SetDirDevice(x *Executor, fn func(path string) (int64, error)) {
	if fn == nil {
		x.dirDev = nil
		return
	}
	x.dirDev = func(p string, _ fs.DirEntry) (int64, error) { return fn(p) }
}

// ThumbIOCost is what a thumbnail of t from a source of size bytes books in
// the I/O bucket.
func ThumbIOCost(t *ThumbTask, size int64) int64 { return thumbIOCost(t, size) }

// VideoThumbIOCost bounds what a video source books.
const VideoThumbIOCost = videoThumbIOCost

// SetBeforeCleanRow installs a function a cleanup calls before it deletes
// each thumbnail row and its cache file.
func SetBeforeCleanRow(x *Executor, fn func(id int64, path string)) { x.beforeCleanRow = fn }

// SetHashChunk installs a function called after every chunk a hash job reads.
func SetHashChunk(x *Executor, fn func(bytesDone int64)) { x.hashChunk = fn }

// ReserveIOWait books cost bytes like ReserveIO and returns the wait it
// would sleep, on the store clock.
func ReserveIOWait(ctx context.Context, x *Executor, bucket string, cost int64) (time.Duration, error) {
	return x.reserveIO(ctx, bucket, cost)
}

// HashPaths hashes paths the way a hash job does (one pool, several files
// in flight) and returns their digests in order.
func HashPaths(ctx context.Context, x *Executor, paths []string, algo string) ([]string, error) {
	pool := filehash.NewPool(0)
	defer pool.Close()
	out := make([]string, len(paths))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(filesInFlight())
	for i, p := range paths {
		g.Go(func() error {
			r, err := x.hashOnPool(gctx, pool, p, algo, nil)
			out[i] = r.Digest
			return err
		})
	}
	return out, g.Wait()
}

// SetPolled has fn called at the start of every claim loop round.
func SetPolled(x *Executor, fn func()) { x.polled = fn }

// SetThumbStep installs a function a render calls with its lease's context
// at each step named in Executor.thumbStep.
func SetThumbStep(x *Executor, fn func(ctx context.Context, step string)) { x.thumbStep = fn }

// SetThumbSweepBatch sets the rows a sweep round reads at most.
func SetThumbSweepBatch(x *Executor, n int) { x.sweepBatch = n }
