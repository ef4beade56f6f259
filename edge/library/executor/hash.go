package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/zeebo/blake3"
	"golang.org/x/sync/errgroup"

	"github.com/vesta-cx/euterpe/edge/library/filehash"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// NewHasher returns a streaming hasher for algo (blake3 or sha256).
func NewHasher(algo string) (hash.Hash, error) {
	switch algo {
	case store.AlgoBLAKE3, "":
		return blake3.New(), nil
	case store.AlgoSHA256:
		return sha256.New(), nil
	}
	return nil, fmt.Errorf("unknown hash algorithm %q", algo)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// HashReader streams r through algo, checking ctx between chunks and
// adding every chunk's length to *done.
func HashReader(ctx context.Context, r io.Reader, algo string, done func(int64)) (string, error) {
	h, err := NewHasher(algo)
	if err != nil {
		return "", err
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, err := r.Read(buf)
		if n > 0 {
			h.Write(buf[:n])
			if done != nil {
				done(int64(n))
			}
		}
		if err == io.EOF {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", err
		}
	}
}

// hashAttempts is how many times a file that changes while it is hashed
// is read again before it is left for the next scan.
const hashAttempts = 3

// HashFile opens path through the root check and hashes it, returning the
// digest and the size and mtime the file had while it was read (unchanged
// from before to after, else an error wrapping filehash.ErrChanged after
// hashAttempts reads).
func (x *Executor) HashFile(ctx context.Context, path, algo string, done func(int64)) (digest string, size, mtimeNS int64, err error) {
	p := filehash.NewPool(0)
	defer p.Close()
	r, err := x.hashOnPool(ctx, p, path, algo, done)
	return r.Digest, r.Size, r.MtimeNS, err
}

// hashOnPool hashes path on p, reopening and reading it again while it
// changes under the hash, up to hashAttempts times. done may be called
// from several goroutines at once.
func (x *Executor) hashOnPool(ctx context.Context, p *filehash.Pool, path, algo string, done func(int64)) (filehash.Result, error) {
	for attempt := 1; ; attempt++ {
		f, _, err := x.Roots.Open(path)
		if err != nil {
			return filehash.Result{}, err
		}
		r, err := filehash.File(ctx, p, f, algo, done)
		_ = f.Close()
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, filehash.ErrChanged) || attempt == hashAttempts || ctx.Err() != nil {
			return filehash.Result{}, fmt.Errorf("%s: %w", path, err)
		}
	}
}

// filesInFlight is how many files a hash job reads at once: one more than
// workers keeps every worker busy while another file is opened and stat'ed.
func filesInFlight() int { return runtime.GOMAXPROCS(0) + 1 }

// hash digests every live file with needs_hash=1, recording a digest only
// when the file still has the size and mtime the scan recorded. Files are
// hashed several at once on one pool of workers (one per core), each large
// BLAKE3 file in parallel segments, so the cores stay busy on a library of
// mostly small files and on a single large one alike. Unreadable or refused
// files are logged and left for the next pass.
func (x *Executor) hash(ctx context.Context, c *Claim, algo string) error {
	if algo == "" {
		algo = store.AlgoBLAKE3
	}
	if _, err := NewHasher(algo); err != nil {
		return &refusedError{code: CodeBadPayload, msg: err.Error()}
	}
	_, totalBytes, err := x.Store.PendingHashWork(ctx)
	if err != nil {
		return err
	}
	// The watch outlives the pool: closing it waits for its workers, and
	// one stuck in a read is what the watch is there to report.
	stall, stopWatch := x.watchStall(ctx, "hash")
	defer stopWatch()
	pool := filehash.NewPool(0)
	defer pool.Close()
	var processed, bytesDone atomic.Int64
	progress := func() {
		if totalBytes > 0 {
			c.SetProgress(processed.Load(), float64(bytesDone.Load())/float64(totalBytes))
		}
	}
	var recordMu sync.Mutex // one catalog write at a time, as before
	var after int64
	for {
		files, err := x.Store.FilesToHash(ctx, after, 256)
		if err != nil {
			return err
		}
		if len(files) == 0 {
			c.SetProgress(processed.Load(), 1)
			return nil
		}
		after = files[len(files)-1].ID
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(filesInFlight())
		for _, f := range files {
			g.Go(func() error {
				stall.begin(f.Path)
				r, err := x.hashOnPool(gctx, pool, f.Path, algo, func(n int64) {
					done := bytesDone.Add(n)
					stall.progress()
					progress()
					if x.hashChunk != nil {
						x.hashChunk(done)
					}
				})
				stall.end(f.Path)
				if gctx.Err() != nil {
					return gctx.Err()
				}
				processed.Add(1)
				if err != nil {
					x.Log.Info("hash: skip file", "file_id", f.ID, "err", err)
					return nil
				}
				if r.Size != f.SizeBytes || r.MtimeNS != f.MtimeNS {
					return nil // changed since the scan: the next scan re-records it
				}
				recordMu.Lock()
				_, err = x.Catalog.RecordHash(gctx, f, algo, r.Digest)
				recordMu.Unlock()
				if err != nil {
					return err
				}
				progress()
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
