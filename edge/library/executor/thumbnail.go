package executor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // GIF input
	"image/jpeg"
	_ "image/png" // PNG input
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/image/draw"
	_ "golang.org/x/image/webp" // WebP input

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/procgroup"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// Thumbnail error codes.
const (
	CodeSourceRefused  = "source_refused"
	CodeSourceMissing  = "source_missing"
	CodeDecodeFailed   = "decode_failed"
	CodeEncodeFailed   = "encode_failed"
	CodeFFmpegMissing  = "ffmpeg_missing"
	CodeFFmpegFailed   = "ffmpeg_failed"
	CodeOutputRefused  = "output_refused"
	CodeSourceTooLarge = "source_too_large"
	CodeRenderTimeout  = "render_timeout"
	CodeThumbnailStale = "lease_expired"
)

var (
	sqlThumbRequeueStale = mustUpdate("thumbnails", "requeue_stale", []Set{
		{"status", "'" + store.MustMove(store.ThumbnailMachine, store.StatusRunning, store.StatusPending) + "'"},
		{"worker_id", "NULL"}, {"worker_heartbeat_at", "NULL"}, {"lease_expires_at", "NULL"}, {"updated_at", "?1"},
	}, "status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= ?1)")

	sqlThumbClaim = mustUpdate("thumbnails", "claim", []Set{
		{"status", "'" + store.MustMove(store.ThumbnailMachine, store.StatusPending, store.StatusRunning) + "'"},
		{"worker_id", "?1"}, {"worker_heartbeat_at", "?2"}, {"lease_expires_at", "?3"}, {"started_at", "?2"}, {"updated_at", "?2"},
	}, `id = (SELECT id FROM thumbnails WHERE status = 'pending' ORDER BY id LIMIT 1) AND status = 'pending'
RETURNING id, file_id, source_path, output_path, media_type, format, max_size, error_count`)

	sqlThumbHeartbeat = mustUpdate("thumbnails", "heartbeat", []Set{
		{"worker_heartbeat_at", "?1"}, {"lease_expires_at", "?2"}, {"updated_at", "?1"},
	}, "id = ?3 AND worker_id = ?4 AND status = 'running' AND lease_expires_at > ?1")

	sqlThumbReady = mustUpdate("thumbnails", "finish_success", []Set{
		{"status", "'" + store.MustMove(store.ThumbnailMachine, store.StatusRunning, store.StatusReady) + "'"},
		{"width", "?1"}, {"height", "?2"}, {"bytes_size", "?3"},
		{"error_code", "NULL"}, {"error_message", "NULL"}, {"retry_after", "NULL"},
		{"finished_at", "?4"}, {"worker_heartbeat_at", "?4"}, {"lease_expires_at", "NULL"}, {"updated_at", "?4"},
	}, "id = ?5 AND worker_id = ?6 AND status = 'running' AND lease_expires_at > ?4")

	sqlThumbFailed = mustUpdate("thumbnails", "finish_failure", []Set{
		{"status", "'" + store.MustMove(store.ThumbnailMachine, store.StatusRunning, store.StatusFailed) + "'"},
		{"error_code", "?1"}, {"error_message", "?2"}, {"error_count", "error_count + 1"}, {"retry_after", "?3"},
		{"finished_at", "?4"}, {"worker_heartbeat_at", "?4"}, {"lease_expires_at", "NULL"}, {"updated_at", "?4"},
	}, "id = ?5 AND worker_id = ?6 AND status = 'running' AND lease_expires_at > ?4")
)

// ThumbTask is a claimed thumbnail row.
type ThumbTask struct {
	ID, FileID             int64
	SourcePath, OutputPath string
	MediaType, Format      string
	MaxSize                int
	ErrorCount             int
	Token                  string
	// Deadline is the end of the claimed lease by this process's monotonic
	// clock (see claimStamp).
	Deadline time.Time
}

// thumbError carries the error code a failure is persisted with.
type thumbError struct {
	code string
	err  error
}

func (e *thumbError) Error() string { return e.code + ": " + e.err.Error() }
func (e *thumbError) Unwrap() error { return e.err }

func thumbErr(code string, err error) error { return &thumbError{code: code, err: err} }

// RequeueStaleThumbnails is the §4.3 claim-path requeue.
func (x *Executor) RequeueStaleThumbnails(ctx context.Context) (int64, error) {
	res, err := x.exec(ctx, sqlThumbRequeueStale, x.now())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ClaimThumbnail requeues stale rows and claims one pending row.
func (x *Executor) ClaimThumbnail(ctx context.Context) (*ThumbTask, error) {
	x.init()
	if _, err := x.RequeueStaleThumbnails(ctx); err != nil {
		return nil, err
	}
	now, deadline := x.claimStamp()
	t := &ThumbTask{Token: x.token(), Deadline: deadline}
	err := x.queryRow(ctx, sqlThumbClaim, func(r *sql.Row) error {
		return r.Scan(&t.ID, &t.FileID, &t.SourcePath, &t.OutputPath, &t.MediaType, &t.Format, &t.MaxSize, &t.ErrorCount)
	}, t.Token, now, x.leaseUntil(now))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim thumbnail: %w", err)
	}
	return t, nil
}

// RunThumbnailOnce claims and renders one thumbnail.
func (x *Executor) RunThumbnailOnce(ctx context.Context) (bool, error) {
	t, err := x.ClaimThumbnail(ctx)
	if err != nil || t == nil {
		return false, err
	}
	renew := func(ctx context.Context) error {
		now := x.now()
		res, err := x.exec(ctx, sqlThumbHeartbeat, now, x.leaseUntil(now), t.ID, t.Token)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return stale("thumbnails", t.ID)
		}
		return nil
	}
	var r rendered
	err = lease.Keep(ctx, x.LeaseTTL, renew, func(ctx context.Context) error {
		var err error
		r, err = x.render(ctx, t)
		return err
	}, lease.Until(t.Deadline))
	bg := context.WithoutCancel(ctx)
	if err == nil {
		if err = x.publish(bg, t, r); err == nil {
			return true, nil
		}
		_ = os.Remove(r.tmp)
		var te *thumbError
		if !errors.As(err, &te) {
			return true, err // the claim was lost, or the database failed
		}
	}
	switch {
	case errors.Is(err, lease.ErrStale):
		return true, nil
	case ctx.Err() != nil:
		return true, ctx.Err()
	case err != nil:
		code := CodeDecodeFailed
		var te *thumbError
		if errors.As(err, &te) {
			code = te.code
		}
		now := x.now()
		retryAfter := now + x.Retry.Delay(t.ErrorCount+1).Milliseconds()
		res, err2 := x.exec(bg, sqlThumbFailed, code, daemon.CapMessage(err.Error()), retryAfter, now, t.ID, t.Token)
		if err2 != nil {
			return true, err2
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return true, stale("thumbnails", t.ID)
		}
	}
	return true, nil
}

// rendered is a finished thumbnail not yet in place: its picture is in tmp,
// beside out, the cache path it is published to.
type rendered struct {
	w, h     int
	size     int64
	tmp, out string
}

// publish records t ready and renames its picture to the cache path in one
// transaction. The fenced write takes SQLite's write lock and holds it until
// the commit, so the rename happens only while the row is still this
// claim's, and nothing that could hand the path to someone else (a requeue
// and reclaim, a cleanup deleting the row and its file, an admission
// replacing the row for a newer version of the source) can come between.
// A render that lost its lease would otherwise overwrite the picture of a
// newer row, served for good, or leave a file no row owns. Should the
// commit fail after the rename, the file stays with the row, still running
// under this claim's lease: its next render replaces it.
func (x *Executor) publish(ctx context.Context, t *ThumbTask, r rendered) error {
	path := store.WritePath{Table: sqlThumbReady.Table, Path: sqlThumbReady.Path}
	return x.Store.TxOnPath(ctx, []store.WritePath{path}, func(tx *sql.Tx) error {
		now := x.now()
		res, err := tx.ExecContext(ctx, sqlThumbReady.SQL, r.w, r.h, r.size, now, t.ID, t.Token)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return stale("thumbnails", t.ID)
		}
		if err := os.Rename(r.tmp, r.out); err != nil {
			return thumbErr(CodeEncodeFailed, err)
		}
		return nil
	})
}

// render makes the picture of t from the source (under a library root
// only) in a temp file beside t.OutputPath (under the thumbnails directory
// only), for publish to move into place. The temp file is removed unless
// render succeeds; then it is the caller's.
func (x *Executor) render(ctx context.Context, t *ThumbTask) (r rendered, err error) {
	// The cache may have been cleared by removing the directory; without
	// it every render would fail, and spend the attempts of files that
	// have nothing wrong with them.
	if err := x.Thumbs.Ensure(); err != nil {
		return rendered{}, thumbErr(CodeOutputRefused, fmt.Errorf("thumbnails directory: %w", err))
	}
	if err := x.Thumbs.Contains(t.OutputPath); err != nil {
		return rendered{}, thumbErr(CodeOutputRefused, err)
	}
	// Contains judged the cleaned path; the kernel would walk a ".." after
	// a symlink in the raw one elsewhere, and the rename would replace
	// whatever is there.
	out := filepath.Clean(t.OutputPath)
	src, _, err := x.Roots.Open(t.SourcePath)
	if errors.Is(err, pathsafe.ErrOutside) {
		return rendered{}, thumbErr(CodeSourceRefused, err)
	}
	if err != nil {
		return rendered{}, thumbErr(CodeSourceMissing, err)
	}
	defer src.Close()
	if err := x.checkPixels(ctx, src, t, renderedInGo(t)); err != nil {
		return rendered{}, err
	}
	if st, err := src.Stat(); err == nil {
		if err := x.ReserveIO(ctx, ThumbnailIOBucket, thumbIOCost(t, st.Size())); err != nil {
			return rendered{}, err
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), thumbTempPrefix+"*")
	if err != nil {
		return rendered{}, thumbErr(CodeEncodeFailed, err)
	}
	tmpName := tmp.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmpName)
		}
	}()
	if renderedInGo(t) {
		err = x.renderImageJPEG(ctx, src, tmp, t.MaxSize)
	} else {
		tmp.Close()
		err = x.renderFFmpeg(ctx, src, tmpName, t)
	}
	_ = tmp.Close() // already closed on the ffmpeg path
	if err != nil {
		return rendered{}, err
	}
	w, h, err := outputSize(tmpName)
	if err != nil {
		return rendered{}, thumbErr(CodeEncodeFailed, err)
	}
	st, err := os.Stat(tmpName)
	if err != nil {
		return rendered{}, thumbErr(CodeEncodeFailed, err)
	}
	x.step(ctx, "rendered")
	// The lease may have been lost while the picture was made (the Go
	// decoder does not watch ctx, and ffmpeg may have exited just before):
	// publish is fenced anyway, but a lost claim has nothing to publish.
	if err := context.Cause(ctx); err != nil {
		return rendered{}, err
	}
	return rendered{w: w, h: h, size: st.Size(), tmp: tmpName, out: out}, nil
}

func (x *Executor) step(ctx context.Context, name string) {
	if x.thumbStep != nil {
		x.thumbStep(ctx, name)
	}
}

// videoThumbIOCost bounds what a video source's thumbnail books in the I/O
// bucket. ffmpeg reads the container's header and index (a few MiB even
// for hours of video, at the end of a file not laid out for streaming) and
// the stream from the keyframe before 1 s up to that frame: at 100 Mbit/s,
// two seconds are 25 MiB. Booking the whole file would make one 4 GiB video
// hold every worker's next thumbnail for a minute at the default rate.
const videoThumbIOCost = 32 << 20

// thumbIOCost is what rendering t from a source of size bytes books in the
// I/O bucket: an image is decoded whole, so its size; a video, whose one
// frame ffmpeg reads, its size up to videoThumbIOCost.
func thumbIOCost(t *ThumbTask, size int64) int64 {
	if t.MediaType == store.MediaVideo {
		return min(size, videoThumbIOCost)
	}
	return size
}

// renderImageJPEG decodes JPEG, PNG, GIF or WebP, scales it to fit
// maxSize×maxSize and encodes JPEG, all in Go. Neither the decoder nor the
// scaler watches ctx, and on a large source each takes a while: a lease
// lost meanwhile stops the render between the steps.
func (x *Executor) renderImageJPEG(ctx context.Context, src *os.File, out *os.File, maxSize int) error {
	img, _, err := image.Decode(src)
	if err != nil {
		return thumbErr(CodeDecodeFailed, err)
	}
	x.step(ctx, "decoded")
	if err := context.Cause(ctx); err != nil {
		return err
	}
	b := img.Bounds()
	w, h := fit(b.Dx(), b.Dy(), maxSize)
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.ApproxBiLinear.Scale(dst, dst.Bounds(), img, b, draw.Src, nil)
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if err := jpeg.Encode(out, dst, &jpeg.Options{Quality: 82}); err != nil {
		return thumbErr(CodeEncodeFailed, err)
	}
	return out.Sync()
}

func fit(w, h, max int) (int, int) {
	if w <= max && h <= max {
		return max1(w), max1(h)
	}
	if w >= h {
		return max, max1(h * max / w)
	}
	return max1(w * max / h), max
}

func max1(v int) int {
	if v < 1 {
		return 1
	}
	return v
}

// renderFFmpeg renders video frames (any output) and WebP output through
// the system ffmpeg (libwebp; Go has no lossy WebP encoder). The source is
// passed as an inherited descriptor of the already opened, root-checked
// file, so ffmpeg never resolves the library path itself.
func (x *Executor) renderFFmpeg(ctx context.Context, src *os.File, out string, t *ThumbTask) error {
	bin := x.FFmpeg
	if bin == "" {
		bin = "ffmpeg"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return thumbErr(CodeFFmpegMissing, fmt.Errorf("ffmpeg not found on PATH: %w", err))
	}
	codec := "mjpeg"
	if t.Format == store.FormatWebP {
		codec = "libwebp"
	}
	scale := fmt.Sprintf("scale=w='min(%[1]d,iw)':h='min(%[1]d,ih)':force_original_aspect_ratio=decrease", t.MaxSize)
	// A source can keep a decoder busy for ever (a corrupt or hostile
	// stream), and the lease would be renewed for as long: one deadline
	// covers both attempts, so the worker is released in bounded time.
	limit := x.thumbTimeout()
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	run := func(seek bool) error {
		if _, err := src.Seek(0, 0); err != nil {
			return err
		}
		// -max_pixels makes ffmpeg's decoder refuse an oversized frame
		// itself, for sources whose dimensions could not be read first.
		args := []string{"-hide_banner", "-loglevel", "error", "-nostdin", "-y", "-max_pixels", strconv.FormatInt(min(x.maxPixels(), math.MaxInt32), 10)}
		args = append(args, ffmpegInputArgs...)
		if seek {
			args = append(args, "-ss", "1")
		}
		args = append(args, "-i", "/dev/fd/3", "-frames:v", "1", "-vf", scale, "-c:v", codec, "-f", "image2", out)
		cmd := exec.CommandContext(rctx, path, args...)
		contain(cmd)
		cmd.ExtraFiles = []*os.File{src}
		stderr := procgroup.Output{Max: maxToolOutput}
		cmd.Stderr = &stderr
		if err := procgroup.Run(cmd); err != nil {
			return fmt.Errorf("%w: %s", err, stderr.String())
		}
		if st, err := os.Stat(out); err != nil || st.Size() == 0 {
			return errors.New("ffmpeg wrote no frame")
		}
		return nil
	}
	err = run(t.MediaType == store.MediaVideo)
	if err != nil && t.MediaType == store.MediaVideo && rctx.Err() == nil {
		err = run(false) // clip shorter than the seek point
	}
	if err != nil && ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		return thumbErr(CodeRenderTimeout, fmt.Errorf("ffmpeg did not finish within %s (EUTERPE_LIBRARY_THUMBNAIL_TIMEOUT) and was killed: %w", limit, err))
	}
	if err != nil {
		if strings.Contains(err.Error(), "exceeds specified max pixel count") {
			return thumbErr(CodeSourceTooLarge, fmt.Errorf("ffmpeg refused a frame over the limit of %d pixels: %w", x.maxPixels(), err))
		}
		return thumbErr(CodeFFmpegFailed, err)
	}
	return nil
}

// DefaultThumbTimeout is the default limit of one thumbnail's ffmpeg run.
const DefaultThumbTimeout = 2 * time.Minute

func (x *Executor) thumbTimeout() time.Duration {
	if x.ThumbTimeout > 0 {
		return x.ThumbTimeout
	}
	return DefaultThumbTimeout
}

// contain runs cmd in a process group of its own that is killed whole on
// timeout and when cmd exits (procgroup): a wrapper's ffmpeg must outlive
// neither the render nor the daemon, holding the output pipe open.
// WaitDelay stops the wait should anything outside the group still hold it.
// contain starts ffmpeg or ffprobe in a process group of its own, and
// without the daemon's secrets in its environment: they decode whatever
// files the library holds, and a flaw in a demuxer would run with what
// the edge hands it (the Redis URL, the model server's key, the sync
// secret).
func contain(cmd *exec.Cmd) {
	procgroup.Contain(cmd)
	cmd.Env = daemon.ChildEnv(os.Environ())
	cmd.WaitDelay = 5 * time.Second
}

// maxToolOutput bounds what is kept of what ffmpeg or ffprobe prints. A
// hostile or corrupt source can keep a decoder printing errors until the
// thumbnail timeout; the first messages name the problem (the -max_pixels
// refusal among them) and a stored message keeps 512 bytes anyway.
const maxToolOutput = 16 << 10

// outputSize reads the dimensions of a rendered thumbnail.
func outputSize(path string) (int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	cfg, _, err := image.DecodeConfig(f)
	if err != nil {
		return 0, 0, err
	}
	return cfg.Width, cfg.Height, nil
}
