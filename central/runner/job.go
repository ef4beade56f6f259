package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/central/transcode"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// guardThreshold is the source size (1 GB, §11's ">1GB" read as 10^9
// bytes: the stricter reading, so no source the contract caps escapes it)
// above which each output must stay within guardFactor times the source.
// A variable only so tests can lower it instead of moving gigabytes.
var guardThreshold int64 = 1_000_000_000

const guardFactor = 2

// outputLimit is the most bytes each output of a source of srcSize bytes
// may take, or 0 for no limit: guardFactor times a source above
// guardThreshold. An output of exactly that size is within the limit.
func outputLimit(srcSize int64) int64 {
	if srcSize > guardThreshold {
		return guardFactor * srcSize
	}
	return 0
}

// Process runs one claimed job to its end: success, a recorded failure, or
// a silent stop when the lease turns out to be lost. Its scratch directory
// is removed on every path.
func (r *Runner) Process(ctx context.Context, j *inbox.Job) {
	log := r.log.With("job_id", j.ID, "claim_version", j.Version, "attempt", j.Attempt)
	dir, cleanup, err := r.scratch.Attempt(j.ID, j.Version)
	defer cleanup()
	var st staging
	if err == nil {
		// Progress feeds the lease: the heartbeat renews it only while the
		// watchdog has seen progress within the stall timeout, and the
		// watchdog cancels the work once it has not (ErrStalled).
		wd := newWatchdog(r.set.Stall(), lease.HeartbeatInterval(r.set.LeaseTTL))
		// The store serialises access to j's claim, so the heartbeat and
		// the work may both write through it.
		err = lease.Keep(ctx, r.set.LeaseTTL,
			func(ctx context.Context) error {
				if wd.stalled() {
					return lease.ErrSkipped // no renewal: the work is being cancelled
				}
				return r.jobs.Heartbeat(ctx, j, r.set.LeaseTTL)
			},
			func(ctx context.Context) error {
				return wd.supervise(ctx, func(ctx context.Context) error { return r.execute(ctx, j, dir, log, wd, &st) })
			},
			lease.OnRenewError(func(err error) {
				log.Warn("lease renewal failed; retrying at the next heartbeat", "lease_ttl", r.set.LeaseTTL, "err", err)
			}),
			lease.Until(j.Deadline))
	}
	r.finish(ctx, j, err, log)
	// Only once the outcome is recorded: removing the staged objects
	// talks to the output endpoint, which may be the very thing that
	// hangs, and must not hold back the outcome or outlast the lease.
	r.discard(ctx, j, st, log)
}

// finish records the outcome of an attempt.
func (r *Runner) finish(ctx context.Context, j *inbox.Job, err error, log *slog.Logger) {
	// Writes after shutdown began still need a little time of their own.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch {
	case err == nil:
		r.metrics.Attempts.WithLabelValues(OutcomeSucceeded).Inc()
		log.Info("job succeeded")
	case errors.Is(err, lease.ErrStale):
		r.metrics.Attempts.WithLabelValues(OutcomeLeaseLost).Inc()
		log.Warn("lease lost; abandoning job", "err", err)
	case ctx.Err() != nil || infrastructure(err):
		r.metrics.Attempts.WithLabelValues(OutcomeReleased).Inc()
		var rerr error
		if infrastructure(err) {
			// Not ready until a check finds the programs working again, so
			// the job is not claimed, fetched and given back in a loop.
			r.check.broken(err)
			r.missing.Store(true)
			jerr := classify(err)
			log.Error("transcoder missing or broken; giving job back without spending an attempt", "code", jerr.Code, "err", err)
			rerr = r.jobs.ReleaseError(wctx, j, jerr)
		} else {
			rerr = r.jobs.Release(wctx, j)
		}
		if rerr != nil && !errors.Is(rerr, lease.ErrStale) {
			log.Warn("release failed; the lease will expire instead", "err", rerr)
		}
	default:
		jerr := classify(err)
		status, ferr := r.jobs.Fail(wctx, j, jerr)
		if ferr != nil {
			log.Warn("recording failure failed", "code", jerr.Code, "err", ferr)
			return
		}
		r.metrics.Attempts.WithLabelValues(status).Inc()
		log.Warn("attempt failed", "code", jerr.Code, "class", string(jerr.Class), "status", status, "err", jerr.Message)
	}
}

// execute is one attempt: fetch, transcode each rendition, upload, succeed.
// Each step touches wd as it moves: bytes fetched, ffmpeg progress, bytes
// uploaded. Every object it stages is added to st, for the caller to
// remove once the outcome is recorded.
func (r *Runner) execute(ctx context.Context, j *inbox.Job, dir string, log *slog.Logger, wd *watchdog, st *staging) error {
	rends := make([]transcode.Rendition, len(j.Renditions))
	for i, x := range j.Renditions {
		rends[i] = transcode.Rendition{Name: x.Name, Codec: x.Codec, BitrateKbps: x.BitrateKbps,
			SampleRate: x.SampleRateHz, Channels: x.Channels, Container: x.Container}
	}
	if err := r.jobs.Advance(ctx, j, schema.StatusFetching); err != nil {
		return err
	}
	for _, rd := range rends {
		if err := rd.Validate(); err != nil {
			return err
		}
		// Refused before the source is fetched: such a job can never be
		// written where it says.
		if err := storage.CheckKey(storage.ObjectKey(j.Output.Prefix, rd.FileName())); err != nil {
			return fmt.Errorf("output.prefix %q: %w", j.Output.Prefix, err)
		}
	}
	// Jobs accepted before POST /transcode refused this are still queued:
	// nothing may be written over the requester's source.
	if err := checkSource(j, rends); err != nil {
		return err
	}
	srcPath := filepath.Join(dir, "source")
	var srcSize int64
	err := r.withRefresh(ctx, j, wd, "fetch", func(c credentials.Storage) error {
		n, err := r.fetch(ctx, j, c, srcPath, wd)
		srcSize = n
		return err
	})
	if err != nil {
		return err
	}
	log.Debug("fetched source", "bytes", srcSize)

	if err := r.jobs.Advance(ctx, j, schema.StatusProcessing); err != nil {
		return err
	}
	wd.touch()
	outs, err := r.transcodeAll(ctx, j, wd, rends, srcPath, dir, outputLimit(srcSize))
	if err != nil {
		return err
	}
	// The source is no longer needed; free the disk before uploading.
	_ = os.Remove(srcPath)

	if err := r.jobs.Advance(ctx, j, schema.StatusUploading); err != nil {
		return err
	}
	wd.touch()
	if r.beforeOutputs != nil {
		r.beforeOutputs(j)
	}
	files := make([]inbox.OutputFile, len(outs))
	sent := storage.OnProgress(func(n int) {
		if n > 0 {
			wd.touch()
		}
	})
	bucket := storage.Bucket{Endpoint: j.Output.Endpoint, Region: j.Output.Region, Name: j.Output.Bucket}
	st.bucket = bucket
	for i, o := range outs {
		key := storage.ObjectKey(j.Output.Prefix, o.rend.FileName())
		tmp := attemptKey(j.Output.Prefix, j.ID, j.Version, o.rend.FileName())
		attempt := attemptID(j.ID, j.Version)
		err := r.withRefresh(ctx, j, wd, "upload", func(c credentials.Storage) error {
			return r.upload(ctx, bucket, tmp, o.path, o.rend.ContentType(), s3Creds(&c.Output), sent, attemptMetadata(attempt))
		})
		st.outs = append(st.outs, staged{tmp: tmp, final: key, path: o.path, contentType: o.rend.ContentType(), attempt: attempt})
		if err != nil {
			return err
		}
		files[i] = inbox.OutputFile{
			Rendition: o.rend.Name, Bucket: j.Output.Bucket, Key: key, SizeBytes: o.size,
			ContentType: o.rend.ContentType(), Codec: o.rend.Codec, Container: o.rend.ContainerName(),
			BitrateKbps: o.rend.BitrateKbps, SampleRateHz: o.rend.SampleRate, Channels: o.rend.Channels,
			DurationMS: o.duration.Milliseconds(), Checksum: o.checksum,
		}
	}
	if err := r.promote(ctx, j, wd, bucket, st.outs, log); err != nil {
		return err
	}
	if err := r.jobs.Succeed(ctx, j, files); err != nil {
		// The outputs are at their final keys, and a job that did not
		// succeed leaves none: should a later attempt end failed, these
		// would sit in the requester's bucket beside a failure. unpromote
		// fences first, so a success whose commit landed after all (its
		// answer lost) keeps them.
		if !errors.Is(err, lease.ErrStale) {
			finals := make([]string, len(st.outs))
			for i, o := range st.outs {
				finals[i] = o.final
			}
			r.unpromote(ctx, j, bucket, finals, nil, log)
		}
		return err
	}
	return nil
}

// fetch downloads the source into path, replacing any partial earlier try;
// every chunk written touches wd.
func (r *Runner) fetch(ctx context.Context, j *inbox.Job, c credentials.Storage, path string, wd *watchdog) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	src := storage.Source{URL: c.SourceURL, Key: j.Source.Key,
		Bucket: storage.Bucket{Endpoint: j.Source.Endpoint, Region: j.Source.Region, Name: j.Source.Bucket}}
	var creds storage.Credentials
	if c.Source != nil {
		creds = s3Creds(c.Source)
	}
	var opts []storage.FetchOption
	if r.set.FetchTimeout > 0 {
		opts = append(opts, storage.FetchDeadline(time.Now().Add(r.set.FetchTimeout)))
	}
	n, err := r.store.Fetch(ctx, src, creds, touchWriter{f, wd}, int64(r.set.MaxSourceBytes), opts...)
	if cerr := f.Close(); err == nil && cerr != nil {
		return n, cerr
	}
	return n, err
}

func s3Creds(c *credentials.S3) storage.Credentials {
	return storage.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken}
}

type output struct {
	rend     transcode.Rendition
	path     string
	size     int64
	duration time.Duration
	checksum string
}

// transcodeAll encodes every rendition in turn, reporting overall progress.
// ffprobe reads the source alongside the first ffmpeg run (the percentage
// is known once it answers); media ffprobe rejects fails the job as
// invalid_media whatever ffmpeg did. limit > 0 caps each output's size (the
// §11 guardrail): ffmpeg is stopped as soon as its output passes it. Every
// ffmpeg progress report that advanced (media time or output size) touches
// wd; a hung ffmpeg stops touching it.
func (r *Runner) transcodeAll(ctx context.Context, j *inbox.Job, wd *watchdog, rends []transcode.Rendition, src, dir string, limit int64) ([]output, error) {
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	outs, err := r.encode(ctx, abort, j, wd, rends, src, dir, limit)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, lease.ErrStale) {
		return nil, cause // a progress write found the lease lost
	}
	return outs, err
}

// encode is transcodeAll under a context that abort cancels.
func (r *Runner) encode(ctx context.Context, abort context.CancelCauseFunc, j *inbox.Job, wd *watchdog, rends []transcode.Rendition, src, dir string, limit int64) ([]output, error) {
	type probed struct {
		info transcode.Info
		err  error
	}
	probeCh := make(chan probed, 1)
	var total atomic.Int64 // source duration in ns once ffprobe answered
	pctx, stopProbe := context.WithCancel(ctx)
	go func() {
		info, err := r.tools.Probe(pctx, src)
		total.Store(int64(info.Duration))
		probeCh <- probed{info, err}
	}()
	var probe *probed
	waitProbe := func() error {
		if probe == nil {
			p := <-probeCh
			probe = &p
		}
		return probe.err
	}
	defer func() {
		stopProbe()
		_ = waitProbe() // the probe goroutine always ends before we return
	}()

	rep := r.newReporter(j, abort)
	defer rep.stop()
	outs := make([]output, 0, len(rends))
	for i, rd := range rends {
		path := filepath.Join(dir, "out-"+rd.FileName())
		tctx, cancel := context.WithCancelCause(ctx)
		var seen transcode.Progress
		encoded, err := r.tools.Transcode(tctx, rd, src, path, 0, func(p transcode.Progress) {
			if p.Done > seen.Done || p.Size > seen.Size {
				seen = p
				wd.touch()
			}
			if limit > 0 && p.Size > limit {
				cancel(ErrOutputTooLarge)
			}
			if d := time.Duration(total.Load()); d > 0 {
				done := min(1, float64(p.Done)/float64(d))
				rep.set((float64(i) + done) / float64(len(rends)) * 100)
			}
		})
		cause := context.Cause(tctx)
		cancel(nil)
		if perr := waitProbe(); perr != nil {
			return nil, perr
		}
		if errors.Is(cause, ErrOutputTooLarge) {
			return nil, fmt.Errorf("rendition %s: %w", rd.Name, ErrOutputTooLarge)
		}
		if err != nil {
			return nil, fmt.Errorf("rendition %s: %w", rd.Name, err)
		}
		o, err := describe(rd, path, encoded, wd)
		if err != nil {
			return nil, err
		}
		if limit > 0 && o.size > limit {
			return nil, fmt.Errorf("rendition %s: %d bytes: %w", rd.Name, o.size, ErrOutputTooLarge)
		}
		outs = append(outs, o)
	}
	return outs, nil
}

// describe measures an output: its size and SHA-256, streaming the file
// through the hash (each chunk touches wd); duration is what ffmpeg
// reported encoding.
func describe(rd transcode.Rendition, path string, duration time.Duration, wd *watchdog) (output, error) {
	o := output{rend: rd, path: path, duration: duration}
	f, err := os.Open(path)
	if err != nil {
		return o, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(touchWriter{h, wd}, f, make([]byte, 256<<10))
	if err != nil {
		return o, err
	}
	o.size, o.checksum = n, "sha256:"+hex.EncodeToString(h.Sum(nil))
	return o, nil
}
