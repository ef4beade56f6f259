package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"

	"github.com/zeebo/blake3"

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

// HashFile opens path through the root check and hashes it, returning the
// digest and the size and mtime the file had while it was read (unchanged
// from before to after, else an error).
func (x *Executor) HashFile(ctx context.Context, path, algo string, done func(int64)) (digest string, size, mtimeNS int64, err error) {
	f, _, err := x.Roots.Open(path)
	if err != nil {
		return "", 0, 0, err
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return "", 0, 0, err
	}
	digest, err = HashReader(ctx, f, algo, done)
	if err != nil {
		return "", 0, 0, err
	}
	after, err := f.Stat()
	if err != nil {
		return "", 0, 0, err
	}
	if !sameStat(before, after) {
		return "", 0, 0, fmt.Errorf("%s changed while it was hashed", path)
	}
	return digest, after.Size(), after.ModTime().UnixNano(), nil
}

func sameStat(a, b os.FileInfo) bool {
	return a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// hash digests every live file with needs_hash=1, recording a digest only
// when the file still has the size and mtime the scan recorded. Unreadable
// or refused files are logged and left for the next pass.
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
	var processed, bytesDone int64
	var after int64
	for {
		files, err := x.Store.FilesToHash(ctx, after, 256)
		if err != nil {
			return err
		}
		if len(files) == 0 {
			c.SetProgress(processed, 1)
			return nil
		}
		for _, f := range files {
			after = f.ID
			digest, size, mtime, err := x.HashFile(ctx, f.Path, algo, func(n int64) {
				bytesDone += n
				if totalBytes > 0 {
					c.SetProgress(processed, float64(bytesDone)/float64(totalBytes))
				}
				if x.hashChunk != nil {
					x.hashChunk(bytesDone)
				}
			})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			processed++
			if err != nil {
				x.Log.Info("hash: skip file", "file_id", f.ID, "err", err)
				continue
			}
			if size != f.SizeBytes || mtime != f.MtimeNS {
				continue // changed since the scan: the next scan re-records it
			}
			if _, err := x.Catalog.RecordHash(ctx, f, algo, digest); err != nil {
				return err
			}
			if totalBytes > 0 {
				c.SetProgress(processed, float64(bytesDone)/float64(totalBytes))
			}
		}
	}
}
