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
	run   chan struct{} // holds a token while a check runs: one at a time

	mu  sync.Mutex
	at  time.Time // when err was found; zero: never
	err error
}

func newToolCheck(tools transcode.Tools, every time.Duration) *toolCheck {
	return &toolCheck{tools: tools, every: every, run: make(chan struct{}, 1)}
}

// check returns the standing answer, or checks again once it has expired.
// While another check runs it returns the last answer, if there is one,
// rather than wait: a program that hangs on -version holds its check for
// up to the check's timeout, and /ready must still answer in its own.
func (c *toolCheck) check(ctx context.Context) error {
	if fresh, _, err := c.answer(); fresh {
		return err
	}
	select {
	case c.run <- struct{}{}:
	default:
		if _, known, err := c.answer(); known {
			return err
		}
		select {
		case c.run <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() { <-c.run }()
	if fresh, _, err := c.answer(); fresh {
		return err // found by the check this one waited for
	}
	err := c.tools.Check(ctx)
	if ctx.Err() != nil {
		return err // the caller gave up: no answer about the programs
	}
	c.mu.Lock()
	c.at, c.err = time.Now(), err
	c.mu.Unlock()
	return err
}

// answer is whether the last answer still stands, whether there is one
// at all, and the answer.
func (c *toolCheck) answer() (fresh, known bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	known = !c.at.IsZero()
	return known && time.Since(c.at) < c.every, known, c.err
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
