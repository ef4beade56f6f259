package peers

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// envInt reads a positive integer override, as Euterpe's benchmarks do.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// report prints jobs/s the way Euterpe's burn-downs do, so one table can
// hold both.
func report(b *testing.B, jobs int, total time.Duration) {
	b.ReportMetric(float64(jobs*b.N)/total.Seconds(), "jobs/s")
	b.ReportMetric(0, "ns/op")
}
