package console

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// History keeps the daemon's own numbers in memory for the charts: one
// sample per series every interval, for a span (an hour by default), in a
// ring per series. Sources are callbacks, so a series can come from a
// Redis or SQL query as well as from the Prometheus registry the daemon
// already has (GatherValue, GatherHistogram). No Prometheus server is
// involved, and nothing survives a restart.
type History struct {
	every time.Duration
	keep  int
	log   *slog.Logger

	mu     sync.Mutex
	series []*series
	hists  []*hist
}

// Point is one sample: unix seconds and a value.
type Point [2]float64

// Bucket is one bar of a histogram: observations at most LE (seconds, or
// the histogram's unit; +Inf for the last), Value of them in the window.
type Bucket struct {
	Label string  `json:"label"`
	LE    float64 `json:"-"`
	Value float64 `json:"value"`
}

type seriesKind int

const (
	gauge seriesKind = iota // the value as sampled
	rate                    // per-second increase of a counter
)

type series struct {
	name, unit string
	kind       seriesKind
	f          func(context.Context) (float64, error)
	ring       []Point
	prev       float64
	prevAt     time.Time
	havePrev   bool
}

type hist struct {
	name  string
	f     func(context.Context) ([]Bucket, error)
	snaps [][]Bucket // cumulative snapshots, oldest first
}

// NewHistory samples every interval and keeps span of samples.
func NewHistory(log *slog.Logger, every, span time.Duration) *History {
	if every <= 0 {
		every = 10 * time.Second
	}
	if span < every {
		span = time.Hour
	}
	return &History{every: every, keep: int(span / every), log: log}
}

// Gauge adds a series whose points are f's values.
func (h *History) Gauge(name, unit string, f func(context.Context) (float64, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.series = append(h.series, &series{name: name, unit: unit, kind: gauge, f: f})
}

// Rate adds a series whose points are the per-second increase of the
// counter f reads (throughput). A counter that went down (a restart of
// its source) restarts the rate from its new value.
func (h *History) Rate(name, unit string, f func(context.Context) (float64, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.series = append(h.series, &series{name: name, unit: unit, kind: rate, f: f})
}

// Histogram adds a distribution: f returns cumulative bucket counts (as a
// Prometheus histogram has them), and the snapshot shows how many
// observations fell in each bucket during the span.
func (h *History) Histogram(name string, f func(context.Context) ([]Bucket, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hists = append(h.hists, &hist{name: name, f: f})
}

// Run samples until ctx is done; the daemon owns it like any component.
func (h *History) Run(ctx context.Context) error {
	t := time.NewTicker(h.every)
	defer t.Stop()
	h.Sample(ctx, time.Now())
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			h.Sample(ctx, now)
		}
	}
}

// Sample takes one round of samples at now. A source that fails leaves a
// hole in its series (logged at debug), never a made-up zero.
func (h *History) Sample(ctx context.Context, now time.Time) {
	h.mu.Lock()
	ss, hs := append([]*series(nil), h.series...), append([]*hist(nil), h.hists...)
	h.mu.Unlock()
	for _, s := range ss {
		sctx, cancel := context.WithTimeout(ctx, h.every)
		v, err := s.f(sctx)
		cancel()
		if err != nil {
			if h.log != nil {
				h.log.Debug("history sample failed", "series", s.name, "err", err)
			}
			continue
		}
		h.mu.Lock()
		h.add(s, now, v)
		h.mu.Unlock()
	}
	for _, hi := range hs {
		sctx, cancel := context.WithTimeout(ctx, h.every)
		b, err := hi.f(sctx)
		cancel()
		if err != nil {
			continue
		}
		h.mu.Lock()
		hi.snaps = append(hi.snaps, b)
		if len(hi.snaps) > h.keep+1 {
			hi.snaps = hi.snaps[len(hi.snaps)-h.keep-1:]
		}
		h.mu.Unlock()
	}
}

func (h *History) add(s *series, now time.Time, v float64) {
	point := v
	if s.kind == rate {
		prev, prevAt, had := s.prev, s.prevAt, s.havePrev
		s.prev, s.prevAt, s.havePrev = v, now, true
		if !had {
			return
		}
		dt := now.Sub(prevAt).Seconds()
		if dt <= 0 {
			return
		}
		d := v - prev
		if d < 0 {
			d = v
		}
		point = d / dt
	}
	s.ring = append(s.ring, Point{float64(now.UnixMilli()) / 1000, point})
	if len(s.ring) > h.keep {
		s.ring = s.ring[len(s.ring)-h.keep:]
	}
}

// Series is one series of a Snapshot.
type Series struct {
	Unit   string  `json:"unit,omitempty"`
	Points []Point `json:"points"`
}

// HistogramView is one histogram of a Snapshot.
type HistogramView struct {
	Buckets []Bucket `json:"buckets"`
	Count   float64  `json:"count"`
}

// Snapshot is what the charts read (GET <path> answers it as JSON).
type Snapshot struct {
	IntervalS  float64                  `json:"interval_s"`
	SpanS      float64                  `json:"span_s"`
	Series     map[string]Series        `json:"series"`
	Histograms map[string]HistogramView `json:"histograms"`
}

// Snapshot copies the current history.
func (h *History) Snapshot() Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Snapshot{
		IntervalS: h.every.Seconds(), SpanS: h.every.Seconds() * float64(h.keep),
		Series: map[string]Series{}, Histograms: map[string]HistogramView{},
	}
	for _, s := range h.series {
		out.Series[s.name] = Series{Unit: s.unit, Points: append([]Point{}, s.ring...)}
	}
	for _, hi := range h.hists {
		out.Histograms[hi.name] = window(hi.snaps)
	}
	return out
}

// window turns the oldest and newest cumulative snapshots into the
// per-bucket counts of the span. With one snapshot (or after a reset of
// the source) the newest counts are all there is.
func window(snaps [][]Bucket) HistogramView {
	if len(snaps) == 0 {
		return HistogramView{Buckets: []Bucket{}}
	}
	last := snaps[len(snaps)-1]
	var first []Bucket
	if len(snaps) > 1 && len(snaps[0]) == len(last) {
		first = snaps[0]
	}
	out := make([]Bucket, len(last))
	var below, total float64
	for i, b := range last {
		c := b.Value
		if first != nil && first[i].Value <= c {
			c -= first[i].Value
		}
		out[i] = Bucket{Label: b.Label, LE: b.LE, Value: math.Max(c-below, 0)}
		below = math.Max(c, below)
		total = below
	}
	return HistogramView{Buckets: out, Count: total}
}

// ServeHTTP answers the snapshot as JSON.
func (h *History) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(h.Snapshot())
}

// GatherValue reads the sum of the samples of the counter or gauge family
// metric from g whose labels include every pair of match (nil matches all).
// An absent family reads as 0: a counter nobody has incremented yet.
func GatherValue(g prometheus.Gatherer, metric string, match map[string]string) func(context.Context) (float64, error) {
	return func(context.Context) (float64, error) {
		mf, err := family(g, metric)
		if err != nil || mf == nil {
			return 0, err
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, match) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Untyped != nil:
				sum += m.Untyped.GetValue()
			}
		}
		return sum, nil
	}
}

// GatherHistogram reads the cumulative buckets of the histogram family
// metric, summed over its label sets, for History.Histogram; unit is
// appended to each bucket's label ("≤ 0.5 s").
func GatherHistogram(g prometheus.Gatherer, metric, unit string) func(context.Context) ([]Bucket, error) {
	return func(context.Context) ([]Bucket, error) {
		mf, err := family(g, metric)
		if err != nil || mf == nil {
			return nil, err
		}
		acc := map[float64]float64{}
		var count float64
		for _, m := range mf.GetMetric() {
			hm := m.GetHistogram()
			if hm == nil {
				continue
			}
			count += float64(hm.GetSampleCount())
			for _, b := range hm.GetBucket() {
				acc[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		les := make([]float64, 0, len(acc))
		for le := range acc {
			les = append(les, le)
		}
		sort.Float64s(les)
		out := make([]Bucket, 0, len(les)+1)
		for _, le := range les {
			out = append(out, Bucket{Label: "≤" + strconv.FormatFloat(le, 'g', 3, 64) + unit, LE: le, Value: acc[le]})
		}
		out = append(out, Bucket{Label: "more", LE: math.Inf(1), Value: count})
		return out, nil
	}
}

func family(g prometheus.Gatherer, metric string) (*dto.MetricFamily, error) {
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return nil, fmt.Errorf("gather %s: %w", metric, err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metric {
			return mf, nil
		}
	}
	return nil, nil
}

func labelsMatch(m *dto.Metric, match map[string]string) bool {
	for k, v := range match {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
