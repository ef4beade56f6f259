package testsvc

import (
	"bytes"
	"sync"
)

// LogBuffer collects what a daemon under test logs, safely across the
// goroutines that write to it, so a test can search the log (for a planted
// secret, say) after the fact.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
