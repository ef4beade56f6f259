package runner_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
)

// partitioned is the inbox as a runner cut off from the database sees it:
// while down is set its heartbeats fail with a network error (not a stale
// answer), so it cannot learn that its lease was lost.
type partitioned struct {
	*inbox.Store
	down atomic.Bool
}

var errPartitioned = errors.New("dial tcp 10.0.0.5:5432: connect: network is unreachable")

// cut answers like a database the network no longer reaches.
func (p *partitioned) cut() error {
	if p.down.Load() {
		return errPartitioned
	}
	return nil
}

func (p *partitioned) Heartbeat(ctx context.Context, j *inbox.Job, ttl time.Duration) error {
	if err := p.cut(); err != nil {
		return err
	}
	return p.Store.Heartbeat(ctx, j, ttl)
}

// Every write is cut too: a runner whose transcode ends before it fences
// itself must not reach the job either.
func (p *partitioned) Advance(ctx context.Context, j *inbox.Job, to string) error {
	if err := p.cut(); err != nil {
		return err
	}
	return p.Store.Advance(ctx, j, to)
}

func (p *partitioned) Progress(ctx context.Context, j *inbox.Job, percent int) error {
	if err := p.cut(); err != nil {
		return err
	}
	return p.Store.Progress(ctx, j, percent)
}

func (p *partitioned) Succeed(ctx context.Context, j *inbox.Job, outputs []inbox.OutputFile) error {
	if err := p.cut(); err != nil {
		return err
	}
	return p.Store.Succeed(ctx, j, outputs)
}

func (p *partitioned) Fail(ctx context.Context, j *inbox.Job, jerr inbox.JobError) (string, error) {
	if err := p.cut(); err != nil {
		return "", err
	}
	return p.Store.Fail(ctx, j, jerr)
}

func (p *partitioned) Release(ctx context.Context, j *inbox.Job) error {
	if err := p.cut(); err != nil {
		return err
	}
	return p.Store.Release(ctx, j)
}

func (p *partitioned) ReleaseError(ctx context.Context, j *inbox.Job, jerr inbox.JobError) error {
	if err := p.cut(); err != nil {
		return err
	}
	return p.Store.ReleaseError(ctx, j, jerr)
}

// TestOlderAttemptCannotOverwriteOutputs: runner A transcodes, then loses
// the database (its heartbeats fail, it does not know its lease is gone)
// just before writing its outputs. The lease lapses, runner B reclaims the
// job, reads a source that changed meanwhile and records success with its
// outputs' checksums. When A's network comes back and it goes on, nothing
// it writes may replace B's objects: every stored output still matches the
// checksum recorded for it, and A's attempt leaves no object behind.
func TestOlderAttemptCannotOverwriteOutputs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.putWAV("in/a.wav", 2)
		id := e.enqueue("in/a.wav", []inbox.Rendition{{Name: "hi", Codec: "flac"}}, nil)

		jobsA := &partitioned{Store: e.inbox}
		a := e.runnerOptions(func(s *runner.Settings) { s.LeaseTTL = time.Minute }, func(o *runner.Options) { o.Jobs = jobsA })
		atOutputs, resume := make(chan struct{}), make(chan struct{})
		runner.SetBeforeOutputs(a, func(*inbox.Job) {
			jobsA.down.Store(true)
			close(atOutputs)
			<-resume
			jobsA.down.Store(false)
		})
		aDone := make(chan struct{})
		go func() { defer close(aDone); _, _ = a.RunOnce(ctx) }()
		select {
		case <-atOutputs:
		case <-time.After(60 * time.Second):
			t.Fatal("runner A never reached its outputs")
		}

		// A's lease lapses in the database; B reclaims the job (its backoff
		// skipped) and transcodes a source that changed meanwhile.
		if _, err := e.db.Exec(e.db.Rebind(`UPDATE inbox_jobs SET lease_expires_at = 1 WHERE id = ?`), id); err != nil {
			t.Fatal(err)
		}
		if n, err := e.inbox.Reclaim(ctx, 1); err != nil || n != 1 {
			t.Fatalf("reclaim: %d %v", n, err)
		}
		if _, err := e.db.Exec(e.db.Rebind(`UPDATE inbox_jobs SET next_attempt_at = 0 WHERE id = ?`), id); err != nil {
			t.Fatal(err)
		}
		e.putWAV("in/a.wav", 3)
		v := e.drive(e.runner(nil), id, 60*time.Second)
		if v.Status != schema.StatusSucceeded {
			t.Fatalf("B: %s %+v", v.Status, v.LastError)
		}
		recorded := e.outputs(v)

		close(resume)
		select {
		case <-aDone:
		case <-time.After(60 * time.Second):
			t.Fatal("runner A did not stop")
		}

		v = e.view(id)
		if v.Status != schema.StatusSucceeded || !reflect.DeepEqual(e.outputs(v), recorded) {
			t.Fatalf("after A went on: %s %s", v.Status, v.Outputs)
		}
		e.checkStored(recorded)
		var keys []string
		for obj := range e.s3.Client.ListObjects(ctx, e.s3.Name, minio.ListObjectsOptions{Prefix: "out/" + id + "/", Recursive: true}) {
			if obj.Err != nil {
				t.Fatal(obj.Err)
			}
			keys = append(keys, obj.Key)
		}
		if len(keys) != len(recorded) {
			t.Fatalf("objects under the prefix: %s (want only the %d recorded outputs)", strings.Join(keys, ", "), len(recorded))
		}
	})
}

// TestRunnerFencesItselfWithoutTheDatabase: a runner whose heartbeats stop
// reaching the database (errors, not stale answers) stops its own attempt
// once it has not renewed the lease for a lease TTL: ffmpeg is killed, no
// output object is written, and the attempt is abandoned as a lost lease
// for the next owner.
func TestRunnerFencesItselfWithoutTheDatabase(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		const ttl = 900 * time.Millisecond
		e.putWAV("in/long.wav", 240)
		id := e.enqueue("in/long.wav", []inbox.Rendition{{Name: "slow", Codec: "flac", SampleRateHz: 96000}}, nil)
		jobs := &partitioned{Store: e.inbox}
		r := e.runnerOptions(func(s *runner.Settings) { s.LeaseTTL = ttl }, func(o *runner.Options) { o.Jobs = jobs })
		done := make(chan struct{})
		go func() { defer close(done); _, _ = r.RunOnce(context.Background()) }()
		waitStatus(t, e, id, schema.StatusProcessing, 20*time.Second)
		waitFor(t, 10*time.Second, "ffmpeg running in the scratch dir", func() bool { return len(processesUsing(e.tmp)) > 0 })
		cut := time.Now()
		jobs.down.Store(true)
		select {
		case <-done:
		case <-time.After(ttl + 5*time.Second):
			t.Fatalf("runner still working %v after losing the database (lease TTL %v)", time.Since(cut), ttl)
		}
		// At most a TTL after the last renewal that succeeded, which was
		// before the cut; scheduling slack on a loaded machine.
		if d := time.Since(cut); d > ttl+2*time.Second {
			t.Fatalf("runner stopped %v after the cut, lease TTL %v", d, ttl)
		}
		if ps := processesUsing(e.tmp); len(ps) > 0 {
			t.Fatalf("ffmpeg still running: %v", ps)
		}
		for obj := range e.s3.Client.ListObjects(context.Background(), e.s3.Name, minio.ListObjectsOptions{Prefix: "out/" + id + "/", Recursive: true}) {
			t.Fatalf("object written by a fenced attempt: %s %v", obj.Key, obj.Err)
		}
		if v := e.view(id); v.Status != schema.StatusProcessing || v.ClaimVersion != 1 {
			t.Fatalf("the fenced runner wrote to the job: %s v%d", v.Status, v.ClaimVersion)
		}
		e.scratchEmpty()
	})
}

// TestWriteOnlyOutputCredentials: output credentials that may write the
// prefix but not read it (a server-side copy reads its source: 403) still
// promote staged outputs, by sending the local file to the final key; the
// job succeeds without a refresh and every stored object matches its
// checksum.
func TestWriteOnlyOutputCredentials(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.putWAV("in/a.wav", 2)
		id := e.enqueue("in/a.wav", []inbox.Rendition{{Name: "a", Codec: "opus"}, {Name: "b", Codec: "mp3"}}, nil)
		e.proxy.DenyCopies(true)
		v := e.drive(e.runner(nil), id, 60*time.Second)
		if v.Status != schema.StatusSucceeded || v.AttemptCount != 1 || v.CredentialVersion != 1 {
			t.Fatalf("status %s attempts %d cv %d err %+v", v.Status, v.AttemptCount, v.CredentialVersion, v.LastError)
		}
		if e.proxy.Copies() == 0 {
			t.Fatal("no server-side copy was tried")
		}
		outs := e.outputs(v)
		e.checkStored(outs)
		n := 0
		for obj := range e.s3.Client.ListObjects(ctx, e.s3.Name, minio.ListObjectsOptions{Prefix: "out/" + id + "/", Recursive: true}) {
			if obj.Err != nil || strings.Contains(obj.Key, ".euterpe-attempt-") {
				t.Fatalf("left behind: %s %v", obj.Key, obj.Err)
			}
			n++
		}
		if n != len(outs) {
			t.Fatalf("%d objects under the prefix, %d outputs", n, len(outs))
		}
	})
}
