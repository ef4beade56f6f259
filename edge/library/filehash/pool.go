package filehash

import (
	"runtime"
	"sync"
)

// Pool runs hashing work on a fixed number of goroutines, so however many
// files are in flight, at most that many cores hash at once. Close stops
// the workers; it must not be called while File calls are running.
type Pool struct {
	tasks chan func()
	wg    sync.WaitGroup
}

// NewPool starts workers goroutines (GOMAXPROCS when workers <= 0).
func NewPool(workers int) *Pool {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p := &Pool{tasks: make(chan func())}
	for range workers {
		p.wg.Go(func() {
			for t := range p.tasks {
				t()
			}
		})
	}
	return p
}

// Close stops the workers and waits for them.
func (p *Pool) Close() {
	close(p.tasks)
	p.wg.Wait()
}

// run hands t to a worker, blocking until one takes it.
func (p *Pool) run(t func()) { p.tasks <- t }
