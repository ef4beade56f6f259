package transcode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/procgroup"
)

// Tools locates ffmpeg and ffprobe. The zero value looks both up on PATH at
// every call, so installing ffmpeg fixes a running daemon.
type Tools struct {
	FFmpeg  string // program name or path; "" means "ffmpeg"
	FFprobe string // "" means "ffprobe"
	// Logger receives warnings about a program's run that did not fail
	// it; nil means slog.Default().
	Logger *slog.Logger
}

func (t Tools) lookup(name, def string) (string, error) {
	if name == "" {
		name = def
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", &MissingError{Program: name, Err: err}
	}
	return p, nil
}

// checkTimeout bounds each program's answer to -version in Check: one
// that takes longer merely to start would hold up every job as well.
const checkTimeout = 10 * time.Second

// Check reports whether both programs run: each must be on PATH and answer
// -version with status 0 within checkTimeout. One that is there but cannot
// run (a shared library missing after a partial upgrade, a wrapper pointing
// at nothing) fails it as a missing one does, with a *BrokenError. When ctx
// ends first, Check returns ctx's error, which says nothing of the
// programs. Each call starts both programs: the runner's readiness probe
// keeps its answer for a while.
func (t Tools) Check(ctx context.Context) error {
	if err := t.version(ctx, t.FFmpeg, "ffmpeg"); err != nil {
		return err
	}
	return t.version(ctx, t.FFprobe, "ffprobe")
}

// version runs the program name (def when empty) with -version.
func (t Tools) version(ctx context.Context, name, def string) error {
	bin, err := t.lookup(name, def)
	if err != nil {
		return err
	}
	vctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	cmd := exec.CommandContext(vctx, bin, "-hide_banner", "-version")
	cmd.WaitDelay = 2 * time.Second
	cmd.Env = daemon.ChildEnv(os.Environ())
	procgroup.Contain(cmd)
	stderr := &tail{max: 2048}
	cmd.Stderr = stderr
	err = procgroup.Run(cmd)
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay): // it exited 0
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case vctx.Err() != nil:
		return &BrokenError{Program: def, Stderr: stderr.String(),
			Err: fmt.Errorf("%s gave no answer to -version within %s", bin, checkTimeout)}
	}
	be := &BrokenError{Program: def, Stderr: stderr.String(), Err: err}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		be.ExitCode = ee.ExitCode()
	}
	return be
}

// Info is what ffprobe reports about a source.
type Info struct {
	Duration time.Duration
	Codec    string // of the first audio stream
}

// Probe reads the duration and first audio codec of the file at path.
func (t Tools) Probe(ctx context.Context, path string) (Info, error) {
	bin, err := t.lookup(t.FFprobe, "ffprobe")
	if err != nil {
		return Info{}, err
	}
	args := append([]string{"-v", "error"}, inputArgs...)
	args = append(args, "-show_entries", "format=duration:stream=codec_type,codec_name",
		"-of", "json", "--", path)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 2 * time.Second
	cmd.Env = daemon.ChildEnv(os.Environ()) // it parses media a requester supplied
	procgroup.Contain(cmd)
	stderr := &tail{max: 2048}
	cmd.Stderr = stderr
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err = procgroup.Run(cmd)
	out := stdout.Bytes()
	if ctx.Err() != nil {
		return Info{}, ctx.Err()
	}
	held := errors.Is(err, exec.ErrWaitDelay)
	if err != nil && !held {
		return Info{}, runErr(cmd, "ffprobe", err, stderr.String(), ErrInvalidMedia)
	}
	var doc struct {
		Format struct {
			Duration string `json:"duration"`
		} `json:"format"`
		Streams []struct {
			CodecType string `json:"codec_type"`
			CodecName string `json:"codec_name"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		if held {
			// Not the media's fault: what held the output may have
			// written into it, or been what was to answer.
			return Info{}, &HeldError{Program: "ffprobe", Stderr: stderr.String()}
		}
		return Info{}, &RunError{Program: "ffprobe", Stderr: "unreadable output", kind: ErrInvalidMedia}
	}
	if held {
		// A whole document: ffprobe answered before it exited.
		t.warnHeld(ctx, "ffprobe", bin)
	}
	var info Info
	for _, s := range doc.Streams {
		if s.CodecType == "audio" {
			info.Codec = s.CodecName
			break
		}
	}
	if info.Codec == "" {
		return Info{}, &RunError{Program: "ffprobe", Stderr: "no audio stream", kind: ErrInvalidMedia}
	}
	if secs, err := strconv.ParseFloat(doc.Format.Duration, 64); err == nil && secs > 0 {
		info.Duration = time.Duration(secs * float64(time.Second))
	}
	return info, nil
}

// Progress is one report from a running ffmpeg.
type Progress struct {
	Done    time.Duration // media time encoded so far
	Percent float64       // 0-100; 0 when the duration is unknown
	Size    int64         // bytes of output written so far
}

// Transcode encodes in into out for rendition r and returns the duration
// of the encoded media, as ffmpeg last reported it. total is the source's
// duration (from Probe) used to compute percentages; progress, if not nil,
// is called from the goroutine reading ffmpeg's progress output each time
// ffmpeg reports (about twice a second). Cancelling ctx kills ffmpeg at once.
func (t Tools) Transcode(ctx context.Context, r Rendition, in, out string, total time.Duration, progress func(Progress)) (time.Duration, error) {
	if err := r.Validate(); err != nil {
		return 0, err
	}
	bin, err := t.lookup(t.FFmpeg, "ffmpeg")
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, bin, r.Args(in, out)...)
	cmd.WaitDelay = 2 * time.Second
	cmd.Env = daemon.ChildEnv(os.Environ()) // it parses media a requester supplied
	procgroup.Contain(cmd)
	stderr := &tail{max: 2048}
	cmd.Stderr = stderr
	// Progress is read alongside Run, not to EOF before it: what is left
	// of the program's group may hold stdout open, and Run kills it only
	// once it sees the program exit (WaitDelay bounds anything else).
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	progressDone := make(chan progressEnd, 1)
	go func() { progressDone <- readProgress(pr, total, progress) }()
	err = procgroup.Run(cmd)
	_ = pw.Close()
	res := <-progressDone
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		// ffmpeg reports the end only once it has written its output's
		// trailer: the output is whole, whatever still holds the pipes.
		if !res.ended {
			return 0, &HeldError{Program: "ffmpeg", Stderr: stderr.String()}
		}
		t.warnHeld(ctx, "ffmpeg", bin)
		err = nil
	}
	if err != nil {
		return 0, runErr(cmd, "ffmpeg", err, stderr.String(), ErrFailed)
	}
	return res.done, nil
}

// warnHeld logs that program exited 0, its work complete, while something
// it started outside its process group still held its stdout or stderr:
// os/exec gave up on them after cmd.WaitDelay. That holder lives on,
// beyond the reach of the group kill, until the service manager ends it.
func (t Tools) warnHeld(ctx context.Context, program, bin string) {
	log := t.Logger
	if log == nil {
		log = slog.Default()
	}
	log.WarnContext(ctx, program+" exited 0 but something it started outside its process group (setsid, a daemon) still held its stdout or stderr open; its output is complete and used, the holder is left running",
		"program", bin)
}

// progressEnd is what readProgress saw of ffmpeg's progress output.
type progressEnd struct {
	done  time.Duration // the last media time reported
	ended bool          // "progress=end" was reported
}

// readProgress parses ffmpeg's key=value progress blocks until EOF and
// returns the last media time reported and whether the end was. Each
// block ends with "progress=continue" or "progress=end".
func readProgress(r io.Reader, total time.Duration, progress func(Progress)) progressEnd {
	sc := bufio.NewScanner(r)
	var done time.Duration
	var size int64
	ended := false
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch k {
		case "out_time_us", "out_time_ms": // both are microseconds in ffmpeg
			if us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && us >= 0 {
				done = time.Duration(us) * time.Microsecond
			}
		case "total_size":
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 {
				size = n
			}
		case "progress":
			ended = ended || v == "end"
			if progress == nil {
				continue
			}
			p := Progress{Done: done, Size: size}
			if total > 0 {
				p.Percent = min(100, 100*float64(done)/float64(total))
			}
			if v == "end" {
				p.Percent = 100
			}
			progress(p)
		}
	}
	_, _ = io.Copy(io.Discard, r)
	return progressEnd{done: done, ended: ended}
}

// runErr describes the failed run of cmd. A program that could not be
// started, or exited 126 or 127, is broken (see BrokenError): the machine's
// fault whatever the media, so kind does not apply.
func runErr(cmd *exec.Cmd, program string, err error, stderr string, kind error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if cmd.Process == nil {
			return &BrokenError{Program: program, Err: err}
		}
		return fmt.Errorf("run %s: %w", program, err)
	}
	if code := ee.ExitCode(); code == 126 || code == 127 {
		return &BrokenError{Program: program, ExitCode: code, Stderr: stderr, Err: ee}
	}
	if diskFull(stderr) {
		kind = ErrLocalIO
	}
	re := &RunError{Program: program, ExitCode: ee.ExitCode(), Stderr: stderr, kind: kind}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		re.Signal = ws.Signal()
	}
	return re
}

// diskFull reports whether the program's messages say it could not write
// for want of space. ffmpeg prints strerror's text (it sets no locale, so
// the C library's English) and exits 1, as it does for bad media.
func diskFull(stderr string) bool {
	s := strings.ToLower(stderr)
	return strings.Contains(s, syscall.ENOSPC.Error()) || strings.Contains(s, syscall.EDQUOT.Error())
}

// tail is an io.Writer keeping only the last max bytes written, so a chatty
// ffmpeg cannot grow memory.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(strings.Fields(string(bytes.ToValidUTF8(t.buf, nil))), " ")
}
