package worker

import (
	"strings"
	"sync"
	"time"
)

// coalescer gathers streamed text and hands it to flush at most every
// interval, or at once when maxBytes have gathered, so a token stream costs
// a few Redis writes per second rather than one per token. Flushes are
// serialised and in order. Its ticker goroutine is owned by the coalescer
// and stopped by Close.
type coalescer struct {
	flush    func(string)
	maxBytes int

	mu      sync.Mutex // guards buf
	buf     strings.Builder
	flushMu sync.Mutex // serialises flush calls

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func newCoalescer(interval time.Duration, maxBytes int, flush func(string)) *coalescer {
	c := &coalescer{flush: flush, maxBytes: maxBytes, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				c.Flush()
			}
		}
	}()
	return c
}

// Add appends text; it flushes in the caller when the buffer is full.
func (c *coalescer) Add(text string) {
	c.mu.Lock()
	c.buf.WriteString(text)
	full := c.buf.Len() >= c.maxBytes
	c.mu.Unlock()
	if full {
		c.Flush()
	}
}

// Flush writes out what has gathered, if anything.
func (c *coalescer) Flush() {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	s := c.buf.String()
	c.buf.Reset()
	c.mu.Unlock()
	if s != "" {
		c.flush(s)
	}
}

// Close stops the ticker and, when final is true, flushes the rest; the
// last delta is therefore written before the job's terminal event.
func (c *coalescer) Close(final bool) {
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		if final {
			c.Flush()
		}
	})
}
