package filehash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"sync"
	"syscall"

	"lukechampine.com/blake3/guts"
)

// Algorithm names, as the library stores them.
const (
	BLAKE3 = "blake3"
	SHA256 = "sha256"
)

// SegmentSize is the span one worker hashes at a time: a power-of-two
// number of chunks, large enough that merging costs nothing and small
// enough that what was read is still in the core's cache when it is hashed.
const SegmentSize = 1 << 20

// ErrChanged reports a file whose size, modification time or inode change
// time moved while it was hashed, or that ended before its size: the digest
// would describe no version of the file.
var ErrChanged = errors.New("file changed while it was hashed")

// bufPool holds segment buffers; the slack past SegmentSize lets the last
// subtree of a file's tail read whole 16-chunk blocks (see subtree).
var bufPool = sync.Pool{New: func() any { b := make([]byte, SegmentSize+simdBytes); return &b }}

// Result is a file's digest with the size and modification time it had,
// unchanged (and its ctime too), from before the first read to after the
// last.
type Result struct {
	Digest  string
	Size    int64
	MtimeNS int64
}

// File hashes f with algo on p's workers. done, when set, is called from
// those workers (possibly at once) with each span's length as it is read.
// A file that changes under the hash reports ErrChanged.
func File(ctx context.Context, p *Pool, f *os.File, algo string, done func(int64)) (Result, error) {
	before, err := f.Stat()
	if err != nil {
		return Result{}, err
	}
	size := before.Size()
	var digest string
	switch algo {
	case BLAKE3, "":
		digest, err = blake3File(ctx, p, f, size, done)
	case SHA256:
		digest, err = sha256File(ctx, p, f, size, done)
	default:
		return Result{}, fmt.Errorf("unknown hash algorithm %q", algo)
	}
	if err != nil {
		return Result{}, err
	}
	after, err := f.Stat()
	if err != nil {
		return Result{}, err
	}
	if after.Size() != size || !after.ModTime().Equal(before.ModTime()) || !sameCtime(before, after) {
		return Result{}, ErrChanged
	}
	return Result{Digest: digest, Size: size, MtimeNS: after.ModTime().UnixNano()}, nil
}

// sameCtime compares the inode change times of two stats of one file: a
// rewrite that keeps the size and puts the mtime back (a tag editor
// preserving it) cannot put the ctime back.
func sameCtime(a, b os.FileInfo) bool {
	sa, okA := a.Sys().(*syscall.Stat_t)
	sb, okB := b.Sys().(*syscall.Stat_t)
	if !okA || !okB {
		return true
	}
	return sa.Ctim == sb.Ctim
}

// readFull reads exactly len(buf) bytes at off; a file that ends sooner
// has shrunk since it was measured.
func readFull(f *os.File, buf []byte, off int64) error {
	n, err := f.ReadAt(buf, off)
	if n == len(buf) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return ErrChanged
	}
	return err
}

// span is one worker's share of a BLAKE3 file: the bytes [off, off+n) and
// where its subtrees go in the file's list of pieces.
type span struct {
	off, n int64
	first  int // index of its first piece
}

func blake3File(ctx context.Context, p *Pool, f *os.File, size int64, done func(int64)) (string, error) {
	if size == 0 {
		n := guts.CompressChunk(nil, &guts.IV, 0, 0)
		return hex.EncodeToString(rootBytes([]piece{{node: n}})), nil
	}
	segHeight := bits.TrailingZeros64(SegmentSize / guts.ChunkSize)
	full := size / SegmentSize
	tail := size % SegmentSize
	tailHeights := guts.Eigentrees(uint64(full*SegmentSize/guts.ChunkSize), uint64((tail+guts.ChunkSize-1)/guts.ChunkSize))
	pieces := make([]piece, int(full)+len(tailHeights))
	spans := make([]span, 0, full+1)
	for i := int64(0); i < full; i++ {
		spans = append(spans, span{off: i * SegmentSize, n: SegmentSize, first: int(i)})
	}
	if tail > 0 {
		spans = append(spans, span{off: full * SegmentSize, n: tail, first: int(full)})
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	for _, s := range spans {
		if err := ctx.Err(); err != nil {
			fail(err)
			break
		}
		wg.Add(1)
		p.run(func() {
			defer wg.Done()
			if ctx.Err() != nil {
				return
			}
			bp := bufPool.Get().(*[]byte)
			defer bufPool.Put(bp)
			buf := (*bp)[:s.n]
			if err := readFull(f, buf, s.off); err != nil {
				fail(err)
				return
			}
			counter := uint64(s.off / guts.ChunkSize)
			if s.n == SegmentSize {
				pieces[s.first] = piece{subtree(buf, counter), segHeight}
			} else {
				var at int64
				for i, h := range tailHeights {
					end := min(at+int64(guts.ChunkSize)<<h, s.n)
					pieces[s.first+i] = piece{subtree((*bp)[at:end], counter+uint64(at/guts.ChunkSize)), h}
					at = end
				}
			}
			if done != nil {
				done(s.n)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return "", firstErr
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return hex.EncodeToString(rootBytes(pieces)), nil
}

func rootBytes(pieces []piece) []byte {
	r := root(pieces)
	return r[:]
}

// sha256File streams f through SHA-256 on one worker: the hash has no tree
// to split, so its parallelism is files, not spans.
func sha256File(ctx context.Context, p *Pool, f *os.File, size int64, done func(int64)) (string, error) {
	var digest string
	var err error
	ran := make(chan struct{})
	p.run(func() {
		defer close(ran)
		h := sha256.New()
		bp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bp)
		for off := int64(0); off < size; {
			if err = ctx.Err(); err != nil {
				return
			}
			buf := (*bp)[:min(SegmentSize, size-off)]
			if err = readFull(f, buf, off); err != nil {
				return
			}
			h.Write(buf)
			off += int64(len(buf))
			if done != nil {
				done(int64(len(buf)))
			}
		}
		digest = hex.EncodeToString(h.Sum(nil))
	})
	<-ran
	return digest, err
}
