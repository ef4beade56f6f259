package runner

import (
	"context"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/central/transcode"
)

// toolCheckEvery is how long an answer of the transcoder check stands. The
// check starts ffmpeg and ffprobe, too much to do on every claim and every
// /ready; a program removed or broken in the meantime is caught by the job
// that meets it (see toolCheck.broken).
const toolCheckEvery = 30 * time.Second

// toolCheck keeps the answer of transcode.Tools.Check for toolCheckEvery.
type toolCheck struct {
	tools transcode.Tools
	every time.Duration

	mu  sync.Mutex // held while a check runs, so that one runs at a time
	at  time.Time  // when err was found; zero: never
	err error
}

// check returns the standing answer, or checks again once it has expired.
func (c *toolCheck) check(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !c.at.IsZero() && now.Sub(c.at) < c.every {
		return c.err
	}
	err := c.tools.Check(ctx)
	if ctx.Err() != nil {
		return err // the caller gave up: no answer about the programs
	}
	c.at, c.err = now, err
	return err
}

// broken records err, a job's finding that a program is missing or cannot
// run, as the answer for the next toolCheckEvery, whatever -version says:
// a program can pass it and still fail every job (a wrapper that answers
// -version itself), and a passing check would have the runner claim the
// next job at once, fetch its source and give it back again.
func (c *toolCheck) broken(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.err = time.Now(), err
}
