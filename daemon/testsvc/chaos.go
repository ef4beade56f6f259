package testsvc

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Chaos is what one chaos run shares between its fault injector and its
// audit: the seeded schedule, the sizes read from the environment and the
// report table written to EUTERPE_CHAOS_OUT. The seed fixes the schedule
// (which fault, when, which victim); how the processes interleave around it
// is up to the machine, so a seed reproduces the faults, not every race.
type Chaos struct {
	Name string
	Seed uint64

	t     testing.TB
	mu    sync.Mutex
	rng   *rand.Rand
	start time.Time

	faults    map[string]int
	recovery  time.Duration
	rows      [][2]string // extra figures, in the order added
	failures  []string
	failedIDs []string
}

// NewChaos starts a run named name. The seed comes from EUTERPE_CHAOS_SEED
// or the clock, and is logged so a failed run can be replayed.
func NewChaos(t testing.TB, name string) *Chaos {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("EUTERPE_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EUTERPE_CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("chaos %s: seed %d (EUTERPE_CHAOS_SEED=%d replays this schedule)", name, seed, seed)
	return &Chaos{Name: name, Seed: seed, t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		start: time.Now(), faults: map[string]int{}}
}

// ChaosSize is the integer setting env, or def when unset (the full run's
// size is the default; CI sets smaller ones).
func ChaosSize(t testing.TB, env string, def int) int {
	t.Helper()
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		t.Fatalf("%s=%q: not a count", env, s)
	}
	return v
}

// Between returns a duration drawn from the seeded schedule in [lo, hi).
func (c *Chaos) Between(lo, hi time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return lo + time.Duration(c.rng.Int64N(int64(hi-lo)))
}

// Pick returns an index in [0, n) from the seeded schedule.
func (c *Chaos) Pick(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.IntN(n)
}

// Faults calls inject every 2–5 s (by the seeded schedule) with the
// fault's number, until done is closed and at least three faults have
// run, so a short run still meets every kind of fault its scenario has.
func (c *Chaos) Faults(done <-chan struct{}, inject func(i int)) {
	for i := 0; ; i++ {
		wait := time.After(c.Between(2*time.Second, 5*time.Second))
		if i >= 3 {
			select {
			case <-done:
				return
			case <-wait:
			}
		} else {
			<-wait
		}
		inject(i)
	}
}

// Fault records one injected fault of kind and how long the system took
// to recover from it.
func (c *Chaos) Fault(kind string, recovery time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults[kind]++
	if recovery > c.recovery {
		c.recovery = recovery
	}
	c.t.Logf("chaos %s: %s at +%s, recovered in %s", c.Name, kind, time.Since(c.start).Round(time.Millisecond), recovery.Round(time.Millisecond))
}

// Figure adds a row to the report.
func (c *Chaos) Figure(name string, value any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows = append(c.rows, [2]string{name, fmt.Sprint(value)})
}

// Failf records an audit failure naming the jobs involved; the test fails
// when the report is written.
func (c *Chaos) Failf(ids []string, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if len(ids) > 0 {
		shown := ids
		if len(shown) > 20 {
			shown = shown[:20]
		}
		msg += fmt.Sprintf(" (%d jobs: %s", len(ids), strings.Join(shown, ", "))
		if len(ids) > len(shown) {
			msg += ", …"
		}
		msg += ")"
	}
	c.failures = append(c.failures, msg)
	c.failedIDs = append(c.failedIDs, ids...)
}

// Report renders the table, writes it to EUTERPE_CHAOS_OUT (a directory;
// nothing is written when unset), logs it and fails the test for every
// audit failure recorded.
func (c *Chaos) Report() string {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	kinds := make([]string, 0, len(c.faults))
	total := 0
	for k, n := range c.faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "# chaos %s\n\nseed %d, %s, wall clock %s\n\n| what | value |\n|---|---|\n", c.Name, c.Seed,
		time.Now().UTC().Format(time.RFC3339), time.Since(c.start).Round(time.Second))
	fmt.Fprintf(&b, "| faults injected | %d (%s) |\n", total, strings.Join(kinds, ", "))
	for _, r := range c.rows {
		fmt.Fprintf(&b, "| %s | %s |\n", r[0], r[1])
	}
	fmt.Fprintf(&b, "| longest recovery | %s |\n", c.recovery.Round(time.Millisecond))
	if len(c.failures) == 0 {
		b.WriteString("| audit | passed |\n")
	} else {
		b.WriteString("| audit | FAILED |\n\n")
		for _, f := range c.failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	out := b.String()
	if dir := os.Getenv("EUTERPE_CHAOS_OUT"); dir != "" {
		name := strings.NewReplacer("/", "-", " ", "-").Replace(c.Name)
		path := filepath.Join(dir, fmt.Sprintf("%s-%s.md", name, time.Now().UTC().Format("20060102T150405Z")))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			c.t.Errorf("chaos report: %v", err)
		} else if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			c.t.Errorf("chaos report: %v", err)
		} else {
			c.t.Logf("chaos report written to %s", path)
		}
	}
	c.t.Logf("\n%s", out)
	for _, f := range c.failures {
		c.t.Errorf("chaos %s audit: %s", c.Name, f)
	}
	return out
}
