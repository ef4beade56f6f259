package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// Outputs are written in two steps so that an attempt which lost its lease
// without knowing it (its database unreachable) can never replace the
// objects of the attempt that recorded success:
//
//  1. upload to attempt keys,
//     <prefix>/.euterpe-attempt-<job_id>-<claim_version>/<file>: unique per
//     attempt (the claim version only grows within a job, and the job id
//     tells apart jobs that share a prefix and rendition names), so two
//     attempts never write the same key, and under the job's prefix, which
//     its output credentials are scoped to;
//  2. promote each to its final key with a server-side copy, each try of
//     it (the first and every one after a credential refresh) preceded by
//     a fenced lease renewal (which fails for a stale attempt) and bounded
//     by UploadTimeout (see copy); then record success (fenced). A copy
//     that runs out of that bound is a storage timeout: the attempt fails
//     retryable.
//
// Once the outcome is recorded the attempt keys are deleted (see discard):
// they are the attempt's own, so that needs no lease.
//
// A stale attempt is refused at step 2 before it writes a final key. An
// attempt that passed the fence holds the lease for a TTL from it and from
// each renewal after; lease.Keep cancels its copy once no renewal has
// succeeded for a TTL, and no other attempt can claim the job before the
// lease ends in the database, so a copy by the owner is sent before any
// later owner's.

// attemptKey is where attempt version of job jobID stages the output name.
func attemptKey(prefix, jobID string, version int64, name string) string {
	return storage.ObjectKey(prefix, ".euterpe-attempt-"+attemptID(jobID, version)+"/"+name)
}

// attemptID names attempt version of job jobID, as its staging directory
// does: unique per attempt (see attemptKey).
func attemptID(jobID string, version int64) string {
	return fmt.Sprintf("%s-%d", stagingID(jobID), version)
}

// attemptMeta is the user metadata (x-amz-meta-euterpe-attempt) that names
// the attempt which wrote an output object, staged and final alike: a copy
// carries it over, so it tells the attempt's own object at a final key
// from another's with the same bytes (see ours). The ETag cannot: S3 gives
// a multipart copy an ETag of its own, and under SSE-KMS every object has
// one, while another job's (or attempt's) output can have the same bytes.
const attemptMeta = "euterpe-attempt"

// attemptMetadata is the user metadata of an object attempt writes.
func attemptMetadata(attempt string) storage.UploadOption {
	return storage.UploadMetadata(map[string]string{attemptMeta: attempt})
}

// legacyAttemptKey is where runners that named no job in the staging
// directory staged attempt version: during a rolling upgrade one of them
// may still run an attempt of the same job.
func legacyAttemptKey(prefix string, version int64, name string) string {
	return storage.ObjectKey(prefix, fmt.Sprintf(".euterpe-attempt-%d/%s", version, name))
}

// stagingID is jobID as it can stand in a key segment: as it is when made
// of letters, digits, '-' and '_' (job ids are UUIDs), else a digest, so
// that no id adds a segment or a "." to the key and two ids never share
// one directory.
func stagingID(jobID string) string {
	if jobID != "" && len(jobID) <= 64 && strings.Trim(jobID, tokenChars) == "" {
		return jobID
	}
	sum := sha256.Sum256([]byte(jobID))
	return "h" + hex.EncodeToString(sum[:16])
}

const tokenChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"

// staged is one uploaded output waiting for promotion, with the local
// file it came from and the attempt that staged it (its attemptID).
type staged struct{ tmp, final, path, contentType, attempt string }

// staging is what an attempt staged, in which bucket: discard removes it
// once the attempt's outcome is recorded.
type staging struct {
	bucket storage.Bucket
	outs   []staged
}

// promote copies every staged output to its final key, each copy fenced.
// When one fails, the final keys already written are removed again (see
// unpromote): a job that did not succeed leaves no outputs. A copy (or
// re-upload) that ended without an answer may still be carried out by the
// server, so its final key is removed too when the object there is this
// attempt's (see ours).
func (r *Runner) promote(ctx context.Context, j *inbox.Job, wd *watchdog, b storage.Bucket, outs []staged, log *slog.Logger) error {
	progress := storage.OnProgress(func(n int) {
		if n > 0 {
			wd.touch()
		}
	})
	promoted := make([]string, 0, len(outs))
	for _, o := range outs {
		err := r.withRefresh(ctx, j, wd, "upload", func(c credentials.Storage) error {
			// Every try is fenced afresh, the first and each one after a
			// credential refresh (which may outlast a lease TTL while the
			// heartbeat keeps the lease): a stale attempt stops here.
			if err := r.jobs.Heartbeat(ctx, j, r.set.LeaseTTL); err != nil {
				return fmt.Errorf("fence before promoting %s: %w", o.final, err)
			}
			cr := s3Creds(&c.Output)
			err := r.copy(ctx, wd, b, o, cr)
			if cl, ok := storage.ClassOf(err); ok && cl == storage.Auth && ctx.Err() == nil {
				// Output credentials may be write-only (contract §7 scopes
				// them to writing the prefix), and a copy reads its source:
				// send the local file again instead, bounded like any
				// upload (the heartbeat keeps renewing while it moves).
				err = r.upload(ctx, b, o.final, o.path, o.contentType, cr, progress, attemptMetadata(o.attempt))
			}
			return err
		})
		if err != nil {
			var unsure []staged
			if unanswered(err) {
				unsure = []staged{o}
			}
			r.unpromote(ctx, j, b, promoted, unsure, log)
			return err
		}
		promoted = append(promoted, o.final)
		wd.touch()
	}
	return nil
}

// copy copies o's staged object to its final key on the server. A large
// output can take the server longer than a lease TTL or the stall timeout,
// while no byte the runner sees moves: the copy counts as progress and is
// bounded by UploadTimeout instead, as sending the output is: running out
// of it while ctx is live is a storage timeout (retryable), not the
// attempt's end. With no UploadTimeout the stall timeout bounds the copy.
// The lease needs no bound of its own: the heartbeat renews it meanwhile,
// and lease.Keep cancels ctx, and the copy with it, once renewals stop.
func (r *Runner) copy(ctx context.Context, wd *watchdog, b storage.Bucket, o staged, cr storage.Credentials) error {
	if r.set.UploadTimeout <= 0 {
		return r.store.Copy(ctx, b, o.tmp, o.final, cr)
	}
	defer wd.hold()()
	return r.store.Copy(ctx, b, o.tmp, o.final, cr, storage.CopyDeadline(time.Now().Add(r.set.UploadTimeout)))
}

// unanswered reports whether a failed write got no answer from the server
// (a timeout, a broken connection, the attempt cancelled while it was in
// flight): the server may have carried it out, or may still.
func unanswered(err error) bool {
	if errors.Is(err, ErrUploadTimeout) {
		return true
	}
	var se *storage.Error
	return errors.As(err, &se) && se.Status == 0
}

// upload stores the local file at path as b/key within UploadTimeout. The
// stall timeout does not bound an upload to an endpoint that takes the
// body slowly (each part read for sending moves the progress clock, and a
// single-part body is read before it is sent), nor does the lease (the
// heartbeat renews it while ctx is live): without this bound such an
// endpoint holds a runner slot for as long as it cares to. Running out of
// it while ctx is live is the storage's fault, a retryable storage_timeout
// (contract §5), never the attempt's end.
func (r *Runner) upload(ctx context.Context, b storage.Bucket, key, path, contentType string, creds storage.Credentials, opts ...storage.UploadOption) error {
	if r.set.UploadTimeout <= 0 {
		_, err := r.store.Upload(ctx, b, key, path, contentType, creds, opts...)
		return err
	}
	// The storage's own deadline, not a shorter context: running out of
	// it, the storage sweeps the multipart uploads left at the key (one
	// whose initiation answer was lost cannot be aborted by its id).
	deadline := time.Now().Add(r.set.UploadTimeout)
	_, err := r.store.Upload(ctx, b, key, path, contentType, creds, append(opts, storage.UploadDeadline(deadline))...)
	var se *storage.Error
	if err != nil && ctx.Err() == nil && !time.Now().Before(deadline) && (!errors.As(err, &se) || se.Status == 0) {
		// The storage error is kept as text only so the rule table decides.
		return fmt.Errorf("%w (%s): %v", ErrUploadTimeout, r.set.UploadTimeout, err)
	}
	return err
}

// unpromote removes the final keys an attempt wrote before its promotion
// failed, best effort, on its own short deadline (the attempt's context may
// be over). Only while the attempt still holds the lease: once it is lost,
// a later owner may have written the same keys. A fenced renewal comes
// first and the removals are bounded by a lease TTL from it.
// The final key of each of unsure, an output whose write got no answer,
// is removed only when the object there is this attempt's (see ours).
func (r *Runner) unpromote(ctx context.Context, j *inbox.Job, b storage.Bucket, keys []string, unsure []staged, log *slog.Logger) {
	if len(keys)+len(unsure) == 0 || errors.Is(context.Cause(ctx), lease.ErrStale) {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	c, _, err := r.jobs.Credentials(dctx, j)
	if err != nil {
		log.Warn("outputs of a failed promotion not removed", "err", err)
		return
	}
	creds := s3Creds(&c.Output)
	c = credentials.Storage{}
	sent := time.Now()
	if err := r.jobs.Heartbeat(dctx, j, r.set.LeaseTTL); err != nil {
		log.Warn("outputs of a failed promotion not removed: lease not renewed", "err", err)
		return
	}
	rctx, rcancel := context.WithDeadline(dctx, sent.Add(r.set.LeaseTTL))
	defer rcancel()
	for _, o := range unsure {
		if err := r.ours(rctx, b, o, creds); err != nil {
			log.Warn("output of an unanswered promotion left in place", "key", o.final, "err", err)
			continue
		}
		keys = append(keys, o.final)
	}
	for _, k := range keys {
		if err := r.store.Remove(rctx, b, k, creds); err != nil {
			log.Warn("output of a failed promotion not removed", "key", k, "err", err)
		}
	}
}

// errNotOurs: the object at a final key was not written by this attempt:
// an earlier job's (or attempt's) output the unanswered write did not
// replace, or one written by a runner that names no attempt, which is not
// the attempt's to remove, whatever its bytes.
var errNotOurs = errors.New("the object there is not this attempt's")

// ours returns nil when the object at o.final is one this attempt wrote,
// so that removing the final key removes nothing another job wrote: none
// is there (a removal is then harmless, and takes a write landing
// meanwhile with it), or its attempt metadata names this attempt (a copy
// carries it over from the staged object, a re-upload sends it). Only
// this attempt writes that name, so no time needs comparing: any object
// with it is this attempt's, written by the unanswered write or an
// earlier try of it, and the job is failing. An object without it is not.
func (r *Runner) ours(ctx context.Context, b storage.Bucket, o staged, creds storage.Credentials) error {
	fin, err := r.store.Stat(ctx, b, o.final, creds)
	if storage.NotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if got := fin.Metadata[attemptMeta]; got != o.attempt {
		return fmt.Errorf("%w (written by attempt %q)", errNotOurs, got)
	}
	return nil
}

// discardTimeout caps the removal of an attempt's staged objects: it runs
// after the outcome is recorded, when shutdown (which waits for it) may
// have begun.
const discardTimeout = 30 * time.Second

// discard deletes an attempt's staged objects, best effort: after success
// they are copies, after a failure or a lost lease they are nobody's. It
// runs after the outcome is recorded, outside the lease (the keys are this
// attempt's alone, see attemptKey), so an output endpoint that hangs holds
// back neither the outcome nor the lease; the whole of it is bounded by the
// storage timeout (at most discardTimeout), whatever the attempt's context.
func (r *Runner) discard(ctx context.Context, j *inbox.Job, st staging, log *slog.Logger) {
	if len(st.outs) == 0 {
		return
	}
	bound := discardTimeout
	if t := r.set.StorageTimeout; t > 0 {
		bound = min(bound, t)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	c, _, err := r.jobs.Credentials(dctx, j)
	if err != nil {
		log.Warn("staged outputs not removed", "err", err)
		return
	}
	creds := s3Creds(&c.Output)
	c = credentials.Storage{}
	for _, o := range st.outs {
		if err := r.store.Remove(dctx, st.bucket, o.tmp, creds); err != nil {
			log.Warn("staged output not removed", "key", o.tmp, "err", err)
		}
	}
}
