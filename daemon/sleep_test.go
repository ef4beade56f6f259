package daemon

import (
	"context"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want bool
		max  time.Duration
	}{
		{"waits its time", context.Background(), 20 * time.Millisecond, true, time.Second},
		{"ends with its context", ended, time.Hour, false, time.Second},
		{"no wait", context.Background(), 0, true, time.Second},
		{"no wait, context ended", ended, 0, false, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			if got := Sleep(c.ctx, c.d); got != c.want {
				t.Fatalf("Sleep = %v, want %v", got, c.want)
			}
			if took := time.Since(start); took > c.max || (c.want && took < c.d) {
				t.Fatalf("took %v", took)
			}
		})
	}
}
