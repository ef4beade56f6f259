package executor

import (
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon/procgroup"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// DefaultMaxPixels is the default pixel limit of a thumbnail source
// (about 100 megapixels: a 12000×8000 picture fits, a decompression bomb
// declaring 60000×60000 does not).
const DefaultMaxPixels = 100_000_000

// errNoDimensions means the source's dimensions could not be read without
// decoding it; only ffmpeg's own -max_pixels limit then applies.
var errNoDimensions = errors.New("dimensions unknown")

func (x *Executor) maxPixels() int64 {
	if x.MaxPixels > 0 {
		return x.MaxPixels
	}
	return DefaultMaxPixels
}

// checkPixels reads the source's declared dimensions — the image header
// through image.DecodeConfig, or for a video (and an image Go cannot
// read, sent to ffmpeg) the first video stream through ffprobe — and
// refuses a source over the pixel limit with source_too_large, before
// anything is decoded. An image that is rendered in Go must have a
// readable header. src is left at its start.
func (x *Executor) checkPixels(ctx context.Context, src *os.File, t *ThumbTask, inGo bool) error {
	w, h, err := imageDimensions(src)
	if err != nil && inGo {
		return thumbErr(CodeDecodeFailed, err)
	}
	if err != nil {
		w, h, err = x.probeDimensions(ctx, src)
	}
	if errors.Is(err, errNoDimensions) {
		x.Log.Debug("thumbnail: source dimensions unknown before decoding; ffmpeg -max_pixels applies", "thumbnail", t.ID, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	if limit := x.maxPixels(); w <= 0 || h <= 0 || w*h > limit {
		return thumbErr(CodeSourceTooLarge, fmt.Errorf("source declares %d×%d = %d pixels, over the limit of %d pixels (EUTERPE_LIBRARY_THUMBNAIL_MAX_PIXELS)", w, h, w*h, limit))
	}
	return nil
}

// imageDimensions reads an image header (JPEG, PNG, GIF, WebP).
func imageDimensions(src *os.File) (int64, int64, error) {
	if _, err := src.Seek(0, 0); err != nil {
		return 0, 0, err
	}
	cfg, _, err := image.DecodeConfig(src)
	if _, serr := src.Seek(0, 0); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return 0, 0, err
	}
	return int64(cfg.Width), int64(cfg.Height), nil
}

// probeDimensions asks ffprobe for the first video stream's width and
// height, reading the already opened source as /dev/fd/3.
func (x *Executor) probeDimensions(parent context.Context, src *os.File) (int64, int64, error) {
	bin := x.FFprobe
	if bin == "" {
		bin = "ffprobe"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: ffprobe not found: %v", errNoDimensions, err)
	}
	if _, err := src.Seek(0, 0); err != nil {
		return 0, 0, err
	}
	limit := min(time.Minute, x.thumbTimeout())
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	args := append([]string{"-v", "error"}, ffmpegInputArgs...)
	args = append(args, "-select_streams", "v:0", "-show_entries", "stream=width,height", "-of", "csv=p=0:s=x", "/dev/fd/3")
	cmd := exec.CommandContext(ctx, path, args...)
	contain(cmd)
	cmd.ExtraFiles = []*os.File{src}
	stdout, stderr := procgroup.Output{Max: maxToolOutput}, procgroup.Output{Max: maxToolOutput}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = procgroup.Run(cmd)
	if _, serr := src.Seek(0, 0); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		if parent.Err() != nil {
			return 0, 0, parent.Err()
		}
		if ctx.Err() != nil {
			return 0, 0, thumbErr(CodeRenderTimeout, fmt.Errorf("ffprobe did not finish within %s (at most EUTERPE_LIBRARY_THUMBNAIL_TIMEOUT) and was killed: %w", limit, err))
		}
		return 0, 0, thumbErr(CodeFFmpegFailed, fmt.Errorf("ffprobe: %w: %s", err, strings.TrimSpace(stderr.String())))
	}
	line, _, _ := strings.Cut(strings.TrimSpace(stdout.String()), "\n")
	ws, hs, ok := strings.Cut(strings.TrimSpace(line), "x")
	w, errW := strconv.ParseInt(ws, 10, 64)
	h, errH := strconv.ParseInt(strings.TrimSuffix(hs, "x"), 10, 64)
	if !ok || errW != nil || errH != nil {
		return 0, 0, thumbErr(CodeDecodeFailed, fmt.Errorf("ffprobe found no video stream with dimensions (%q)", line))
	}
	return w, h, nil
}

// ffmpegInputArgs restrict what ffmpeg and ffprobe open from a source: the
// demuxers of the containers and images a thumbnail is made of, read
// through the file protocol only. A demuxer is picked from the content,
// not the name, and some open what the content names: a playlist (HLS)
// saved as video.mp4 in a library would have ffmpeg render a file outside
// every root, or fetch any URL. The mov demuxer's external references are
// off by default.
var ffmpegInputArgs = []string{
	"-protocol_whitelist", "file",
	"-format_whitelist", "mov,matroska,avi,jpeg_pipe,png_pipe,gif,webp_pipe",
}

// renderedInGo reports whether t is rendered by the Go decoder and encoder.
func renderedInGo(t *ThumbTask) bool {
	return t.MediaType == store.MediaImage && t.Format == store.FormatJPEG
}
