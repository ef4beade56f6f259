package runner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
)

// TestJobsSharingAPrefixStageApart: two jobs write the same output prefix
// with the same rendition name, each on its first attempt (claim version
// 1). Job X's promotion copy is held while job Y stages, promotes and
// removes its staged object on another runner. Each attempt stages under a
// key of its own job, so X's copy still finds X's staged bytes: both
// succeed, the final key holds what X (the later promotion) recorded, and
// no staged object is left (fails without the job in the staging key: X
// failed storage_rejected, its staged object removed by Y).
func TestJobsSharingAPrefixStageApart(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.putWAV("in/x.wav", 2)
		e.putWAV("in/y.wav", 3)
		const prefix = "shared/track/"
		samePrefix := func(j *inbox.NewJob) { j.Output.Prefix = prefix }
		long := func(s *runner.Settings) { s.LeaseTTL = 8 * time.Second }

		x := e.enqueue("in/x.wav", oneOpus, samePrefix)
		e.proxy.SlowCopies(1, 3*time.Second)
		rx := e.runner(long)
		xDone := make(chan struct{})
		go func() { defer close(xDone); _, _ = rx.RunOnce(ctx) }()
		waitFor(t, 30*time.Second, "job X's promotion copy", func() bool { return e.proxy.Copies() > 0 })

		y := e.enqueue("in/y.wav", oneOpus, samePrefix)
		vy := e.drive(e.runner(long), y, 60*time.Second)
		select {
		case <-xDone:
		case <-time.After(30 * time.Second):
			t.Fatal("job X's runner did not finish")
		}
		vx := e.view(x)
		if vx.Status != schema.StatusSucceeded || vy.Status != schema.StatusSucceeded {
			t.Fatalf("X %s %+v, Y %s %+v", vx.Status, vx.LastError, vy.Status, vy.LastError)
		}
		outX, outY := e.outputs(vx), e.outputs(vy)
		if outX[0].Key != outY[0].Key || outX[0].Checksum == outY[0].Checksum {
			t.Fatalf("X %+v, Y %+v: want one final key, two encodings", outX, outY)
		}
		e.checkStored(outX)
		n := 0
		for obj := range e.s3.Client.ListObjects(ctx, e.s3.Name, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if obj.Err != nil || strings.Contains(obj.Key, ".euterpe-attempt-") {
				t.Fatalf("left behind: %s %v", obj.Key, obj.Err)
			}
			n++
		}
		if n != 1 {
			t.Fatalf("%d objects under the prefix, want the one final key", n)
		}
	})
}
