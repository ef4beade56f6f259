package ship

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Result is the outcome of one SendOnce.
type Result struct {
	Idle   bool   // the spool had nothing to send
	Action action // what central's answer (or the error) called for
	Status int    // HTTP status, 0 when none came back
	Code   string // central's error code, if any
	Events int    // events in the batch sent
	Gaps   int
	Bytes  int           // the compressed body sent
	Took   time.Duration // from sending the request to reading the answer
	Wait   time.Duration // how long the sender waits before the next attempt
	Err    error         // transport or spool error
}

// sendLoop ships the spool until ctx ends: at full speed while the edge
// is idle, one batch per YieldPace while its workers are busy.
func (s *Shipper) sendLoop(ctx context.Context) {
	y := &yielder{s: s}
	for y.wait(ctx, nil) {
		r := s.sendOnce(ctx, &s.state)
		if r.Idle {
			select {
			case <-ctx.Done():
			case <-s.wake:
			case <-time.After(time.Second):
			}
			continue
		}
		daemon.Sleep(ctx, r.Wait)
	}
}

// sendState is what the sender remembers between attempts.
type sendState struct {
	failures int // consecutive backoff-worthy failures
	skews    int // consecutive clock_skew answers
	// limit, when positive, caps the items (gaps and events) of the next
	// batch: central stores or refuses a batch whole, so a refused batch
	// is halved until the item central refuses goes out alone.
	limit int
	// bodyLimit, when positive, is the smallest compressed body something
	// in front of central (a reverse proxy's body limit) refused with a
	// 413 of its own, learnt at limitAt: batches are cut below it before
	// they are sent rather than refused one after the other. It is
	// forgotten after bodyLimitTTL, so a limit raised since is used.
	bodyLimit int
	limitAt   time.Time
}

// bodyLimitTTL is how long a proxy's body limit learnt from its 413 is
// kept: one refused request an hour finds out whether it was raised.
const bodyLimitTTL = time.Hour

// ErrBodyLimit is matched when something in front of central refuses a
// body of one event alone with a 413 of its own: no split gets it through.
var ErrBodyLimit = errors.New("sync: something in front of central (a reverse proxy's body limit) refuses a batch of one event with 413")

// ErrUnsupportedFormat is matched when central answers a batch with
// wire.CodeUnsupportedFormat: it is older than this edge and does not know
// a field the edge sends.
var ErrUnsupportedFormat = errors.New("sync: central does not know a field of this edge's batches; it is older than the edge")

// overLimit reports whether a compressed body of n bytes is at or over
// the body limit learnt from a proxy's 413.
func (s *Shipper) overLimit(st *sendState, n int) bool {
	if st.bodyLimit > 0 && s.cfg.Now().Sub(st.limitAt) > bodyLimitTTL {
		st.bodyLimit = 0
		s.clear("shrink")
	}
	return st.bodyLimit > 0 && n >= st.bodyLimit
}

func items(p spool.Pending) int { return len(p.Rows) + len(p.Gaps) }

// cut returns the first limit items of p, gaps first; rows stay a prefix,
// as Ack and Quarantine require.
func cut(p spool.Pending, limit int) spool.Pending {
	if limit <= 0 || len(p.Rows)+len(p.Gaps) <= limit {
		return p
	}
	g := min(limit, len(p.Gaps))
	return spool.Pending{Gaps: p.Gaps[:g], Rows: p.Rows[:min(limit-g, len(p.Rows))]}
}

// SendOnce sends the spool's next batch once and acts on the answer (Ack,
// Quarantine, clock correction); it does not wait, it says how long to.
func (s *Shipper) SendOnce(ctx context.Context) Result { return s.sendOnce(ctx, &s.state) }

func (s *Shipper) sendOnce(ctx context.Context, st *sendState) Result {
	if s.Spool() == nil {
		st.failures++
		return Result{Action: actBackoff, Err: ErrNoSpool, Wait: s.backoff.Delay(st.failures)}
	}
	p, err := s.Spool().Next(ctx, wire.MaxEvents, wire.MaxEvents, wire.MaxBodyBytes)
	if err != nil {
		st.failures++
		s.spoolFailed(err)
		s.once("spool", func() { s.log.Warn("sync: cannot read the spool; retrying", "err", err) })
		return Result{Action: actBackoff, Err: err, Wait: s.backoff.Delay(st.failures)}
	}
	s.clear("spool")
	if p.Empty() {
		return Result{Idle: true}
	}
	p = cut(p, st.limit)
	b, body, sub, err := s.encode(p)
	if err != nil && !errors.Is(err, wire.ErrTooLarge) {
		// An event central would refuse whatever the batch: set each such
		// event aside alone, then build the batch again.
		if bad, ok := s.quarantineInvalid(ctx, p); !ok {
			return bad
		}
	}
	if err != nil {
		// Unreachable for events that validate one by one; kept so a bug
		// cannot wedge the spool: the batch is set aside, not resent forever.
		q := spool.Quarantined{Code: "unencodable", Message: err.Error()}
		if qerr := s.Spool().Quarantine(ctx, sub, q); qerr != nil {
			return Result{Action: actBackoff, Err: qerr, Wait: s.backoff.Delay(1)}
		}
		s.quarantined.Add(1)
		s.log.Error("sync: batch quarantined on the edge: cannot encode it", "events", len(sub.Rows), "err", err)
		return Result{Action: actQuarantine, Err: err}
	}
	gz := s.compress(body)
	// Cut below a proxy's known body limit before sending; one item alone
	// goes out whatever its size, to find out whether the limit was raised.
	for s.overLimit(st, len(gz)) && items(sub) > 1 {
		st.limit = items(sub) / 2
		nb, nbody, nsub, err := s.encode(cut(p, st.limit))
		if err != nil { // a part of an encodable batch: not expected
			break
		}
		b, body, sub, gz = nb, nbody, nsub, s.compress(nbody)
	}
	start := time.Now()
	status, hdr, resp, err := s.post(ctx, wire.BatchPath, gz, func(req *http.Request) error {
		return wire.Sign(req, s.signNow(), b, gz, s.cfg.Secret)
	})
	r := Result{Events: len(sub.Rows), Gaps: len(sub.Gaps), Bytes: len(gz), Took: time.Since(start), Status: status, Err: err}
	if err != nil {
		r.Action = actBackoff
	} else {
		r.Code = errorCode(resp)
		r.Action = classify(status, r.Code)
		if r.Action == actAccepted {
			// Accepting deletes the batch: only central's own answer may.
			if err := checkBatchResult(resp, len(b.Events), len(b.Dropped)); err != nil {
				r.Action, r.Err = actBackoff, fmt.Errorf("%w (answer %d)", err, status)
			}
		}
	}
	s.act(ctx, st, &r, sub, body, hdr, resp)
	return r
}

// act carries out r.Action and sets r.Wait. Central has answered: the
// spool is updated even when shutdown began meanwhile, so an accepted batch
// is not sent again by the next start.
func (s *Shipper) act(ctx context.Context, st *sendState, r *Result, sub spool.Pending, body []byte, hdr http.Header, resp []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if r.Action != actClockSkew {
		st.skews = 0
	}
	switch r.Action {
	case actAccepted:
		if err := s.Spool().Ack(ctx, sub); err != nil {
			// Central has them; they will be resent and deduped.
			s.unrecorded(st, r, err)
			return
		}
		st.failures = 0
		s.shipped.Add(int64(r.Events))
		s.gapsSent.Add(int64(r.Gaps))
		// Splitting: grow back towards full batches, unless twice this
		// body would be over a proxy's limit (only to be cut again) or
		// would take too long for the client's timeout.
		if st.limit > 0 && (st.bodyLimit == 0 || 2*r.Bytes < st.bodyLimit) && s.roomToGrow(r.Took) {
			if st.limit *= 2; st.limit >= 2*wire.MaxEvents {
				st.limit = 0
			}
		}
		if st.bodyLimit > 0 && r.Bytes >= st.bodyLimit { // the proxy's limit was raised
			st.bodyLimit = 0
			s.clear("shrink")
		}
		s.clear("network", "auth", "retry", "quarantine", "record", "limit", "unsupported")
	case actQuarantine:
		if items := r.Events + r.Gaps; items > 1 {
			// One bad item refuses the whole batch: resend it in halves
			// at once, down to that item alone, rather than set the good
			// ones aside with it.
			st.failures = 0
			st.limit = items / 2
			r.Action = actSplit
			return
		}
		q := spool.Quarantined{Status: r.Status, Code: r.Code, Message: daemon.CapMessage(string(resp)), Body: body}
		if err := s.Spool().Quarantine(ctx, sub, q); err != nil {
			s.unrecorded(st, r, err)
			return
		}
		st.failures, st.limit = 0, 0
		s.clear("record")
		s.quarantined.Add(1)
		// Once until a batch goes through: a central refusing every item
		// (one older than the edge, say) sets each aside alone.
		s.once("quarantine", func() {
			s.log.Error("sync: central refused an item; it is quarantined in the spool and will not be resent",
				"status", r.Status, "code", r.Code, "events", r.Events, "gaps", r.Gaps, "spool", s.Spool().Path())
		})
	case actShrink:
		// Something in front of central refused the body's size: central
		// never saw the batch, so this is no verdict on its items, and
		// smaller bodies pass. Central deduplicates by event, so the batch
		// is resent in parts at once, each cut below the smallest size
		// refused.
		if st.bodyLimit == 0 || r.Bytes < st.bodyLimit {
			st.bodyLimit = r.Bytes
		}
		st.limitAt = s.cfg.Now()
		if n := r.Events + r.Gaps; n > 1 {
			st.limit = n / 2
			r.Action = actSplit
			s.once("shrink", func() {
				s.log.Warn("sync: something in front of central refuses large batches with 413; sending smaller ones",
					"refused_bytes", r.Bytes, "max_batch_bytes", wire.MaxCompressedBytes)
			})
			return
		}
		// One item alone: raising the limit lets it through, so it is
		// kept, not quarantined, and everything after it waits with it.
		st.failures++
		r.Action, r.Wait = actBackoff, s.backoff.Delay(st.failures)
		r.Err = fmt.Errorf("%w: a request body of %d bytes", ErrBodyLimit, r.Bytes)
		err := r.Err
		s.once("limit", func() {
			s.log.Error("sync: something in front of central refuses a batch of one event with 413; shipping waits, with backoff, until its body limit is raised (nginx: client_max_body_size) to at least max_batch_bytes",
				"err", err, "max_batch_bytes", wire.MaxCompressedBytes, "status", r.Status)
		})
	case actUnsupported:
		// Central does not know a field this edge sends: no batch gets
		// through until it is upgraded, and none is at fault, so nothing
		// is split or set aside; the spool keeps them and its budget
		// bounds them as it does through an outage.
		st.failures++
		r.Wait = s.backoff.Delay(st.failures)
		r.Err = fmt.Errorf("%w (answer %d %s)", ErrUnsupportedFormat, r.Status, r.Code)
		s.once("unsupported", func() {
			s.log.Error("sync: central does not understand this edge's batches (central is older than this edge); events stay spooled and are sent, with backoff, once central is upgraded",
				"status", r.Status, "code", r.Code, "central_says", daemon.CapMessage(string(resp)))
		})
	case actRetryAfter:
		d, ok := retryAfter(hdr, s.cfg.Now())
		// No wait at all (0, a date past) would resend in a tight loop
		// for as long as whatever answers keeps saying it: back off.
		if !ok || d <= 0 {
			st.failures++
			d = s.backoff.Delay(st.failures)
		}
		r.Wait = d
		s.once("retry", func() { s.log.Info("sync: central asks to slow down", "status", r.Status, "wait", d.String()) })
	case actClockSkew:
		st.skews++
		date, err := http.ParseTime(hdr.Get("Date"))
		if err != nil {
			st.failures++
			r.Wait = s.backoff.Delay(st.failures)
			s.once("skew", func() { s.log.Warn("sync: central reports clock skew but sent no usable Date header") })
			return
		}
		off := date.Sub(s.cfg.Now())
		s.offset.Store(int64(off))
		s.log.Warn("sync: edge clock differs from central's; signing with central's time", "offset", off.Round(time.Second).String())
		if st.skews > 1 { // corrected once already: do not spin
			r.Wait = s.backoff.Delay(st.skews)
		}
	case actAuth:
		r.Wait = s.cfg.BackoffMax
		s.once("auth", func() {
			s.log.Error("sync: central refuses this edge's credentials; events keep spooling until the sync secret is fixed or the edge is enabled on central (euterpe-central edge enable); a restart under another EUTERPE_SYNC_EDGE_ID sets them aside, not shipped",
				"status", r.Status, "code", r.Code, "retry_every", r.Wait.String())
		})
	default:
		st.failures++
		r.Wait = s.backoff.Delay(st.failures)
		if n := r.Events + r.Gaps; n > 1 && (timedOut(r.Err) || timeoutAnswer(r.Status)) {
			// An uplink too slow to carry this batch within the client's
			// timeout (or central's, or a proxy's in front of it) would
			// time out on it for ever: the next one is half as large.
			// Accepted batches double again, so after an outage (a dead
			// link times out too) this costs a few small batches.
			st.limit = n / 2
		}
		switch {
		case r.Err != nil:
		case r.Status >= 300 && r.Status < 400:
			r.Err = fmt.Errorf("central answered %d, a redirect to %q: a signed batch is never sent on to another address; set EUTERPE_SYNC_URL to where central answers",
				r.Status, daemon.CapMessage(daemon.RedactURL(hdr.Get("Location"))))
		default:
			r.Err = fmt.Errorf("central answered %d", r.Status)
		}
		err := r.Err
		s.once("network", func() { s.log.Warn("sync: cannot reach central; backing off", "err", err) })
	}
}

// roomToGrow reports whether a batch whose request took took may double:
// twice the batch would take about twice as long, and doubling only while
// that stays within half the client's timeout leaves room for a link whose
// speed varies. Without it, a link too slow for a full batch would time out
// on every other one: halved after a timeout, doubled after the next
// success. Only accepted batches are timed, so a dead link (which times
// out as a slow one does) leaves no mark once it is back.
func (s *Shipper) roomToGrow(took time.Duration) bool {
	t := s.cfg.Client.Timeout
	return t <= 0 || 4*took < t
}

// timedOut reports whether err is a request that ran out of time.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// unrecorded handles an answer the spool could not record: the batch
// stays and goes out again, and central answers it the same way. A spool
// that keeps failing (a dying SD card, a full disk) backs off like any
// other failure, so the same batch is not resent at once, over and over.
func (s *Shipper) unrecorded(st *sendState, r *Result, err error) {
	st.failures++
	s.spoolFailed(err)
	r.Err, r.Wait = err, s.backoff.Delay(st.failures)
	s.once("record", func() {
		s.log.Warn("sync: cannot record central's answer in the spool; the batch will be sent again",
			"spool", s.Spool().Path(), "err", err)
	})
}

// quarantineInvalid sets aside rows and gaps central would refuse
// whatever the batch (data that is not JSON, a malformed id), one by one,
// so they cannot make every batch they are in refused. ok is false when it
// did.
func (s *Shipper) quarantineInvalid(ctx context.Context, p spool.Pending) (Result, bool) {
	n := 0
	for _, g := range p.Gaps {
		wg := s.gap(g)
		err := wire.Batch{EdgeID: s.cfg.EdgeID, Dropped: []wire.Gap{wg}}.Validate()
		if err == nil {
			continue
		}
		body, _ := wire.Marshal(wg)
		q := spool.Quarantined{Code: "invalid_gap", Message: err.Error(), Body: body}
		if qerr := s.Spool().Quarantine(ctx, spool.Pending{Gaps: []spool.Gap{g}}, q); qerr != nil {
			return Result{Action: actBackoff, Err: qerr, Wait: s.backoff.Delay(1)}, false
		}
		s.quarantined.Add(1)
		s.log.Error("sync: a gap cannot be reported to central; it is quarantined in the spool",
			"job_id", daemon.CapMessage(g.JobID), "first_entry_id", g.FirstEntry, "count", g.Count, "err", err)
		n++
	}
	for _, row := range p.Rows {
		e := s.event(row)
		b := wire.Batch{EdgeID: s.cfg.EdgeID, Events: []wire.Event{e}}
		err := b.Validate()
		if err == nil {
			continue
		}
		body, _ := wire.Marshal(e)
		q := spool.Quarantined{Code: "invalid_event", Message: err.Error(), Body: body}
		if qerr := s.Spool().Quarantine(ctx, spool.Pending{Rows: []spool.Row{row}}, q); qerr != nil {
			return Result{Action: actBackoff, Err: qerr, Wait: s.backoff.Delay(1)}, false
		}
		s.quarantined.Add(1)
		s.log.Error("sync: an event cannot be sent to central; it is quarantined in the spool",
			"job_id", daemon.CapMessage(row.JobID), "entry_id", row.Entry, "type", daemon.CapMessage(row.Type), "err", err)
		n++
	}
	if n == 0 {
		return Result{}, true
	}
	return Result{Action: actQuarantine}, false
}

func (s *Shipper) event(r spool.Row) wire.Event {
	e := wire.NewEvent(s.cfg.EdgeID, r.JobID, r.Entry, r.Type, r.Step, r.TS, wire.Sendable([]byte(r.Data)))
	e.Task = r.Task
	return e
}

func (s *Shipper) gap(g spool.Gap) wire.Gap {
	return wire.Gap{GapID: wire.GapID(s.cfg.EdgeID, g.JobID, g.FirstEntry), JobID: g.JobID, Type: g.Type, Count: g.Count,
		FirstEntryID: g.FirstEntry, LastEntryID: g.LastEntry, FirstTS: g.FirstTS, LastTS: g.LastTS}
}

// encode builds the largest prefix batch of p (all its gaps, as many of
// its events as fit wire.MaxBodyBytes) and returns it, its body and the
// part of p it holds.
func (s *Shipper) encode(p spool.Pending) (wire.Batch, []byte, spool.Pending, error) {
	events := make([]wire.Event, len(p.Rows))
	for i, r := range p.Rows {
		events[i] = s.event(r)
	}
	gaps := make([]wire.Gap, len(p.Gaps))
	for i, g := range p.Gaps {
		gaps[i] = s.gap(g)
	}
	// Start from the longest prefix whose estimated encoding fits, so a
	// spool of large events costs one or two encodings, not a halving
	// series from 500.
	n, est := 0, 256+len(gaps)*256
	for n < len(events) {
		r := p.Rows[n]
		est += len(r.Data) + len(r.JobID)*2 + len(r.Entry)*2 + len(r.Type) + len(r.Step) + len(r.Task) + len(s.cfg.EdgeID)*2 + 128
		if est > wire.MaxBodyBytes && n > 0 {
			break
		}
		n++
	}
	for {
		b := wire.Batch{EdgeID: s.cfg.EdgeID, SentAt: s.signNow().UTC(), Events: events[:n], Dropped: gaps}
		body, err := wire.Encode(b)
		sub := spool.Pending{Rows: p.Rows[:n], Gaps: p.Gaps}
		if err == nil {
			return b, body, sub, nil
		}
		if !errors.Is(err, wire.ErrTooLarge) || n <= 1 {
			return b, nil, sub, err
		}
		n /= 2
	}
}

// maxAnswer is the most of an answer the sender reads: central's are a
// few dozen bytes.
const maxAnswer = 64 << 10

// post sends body to central's path, signed by sign, and reads at most
// maxAnswer bytes of the answer, and one more to tell a longer one
// (checkBatchResult refuses it).
func (s *Shipper) post(ctx context.Context, path string, body []byte, sign func(*http.Request) error) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	if err := sign(req); err != nil {
		return 0, nil, nil, err
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	return resp.StatusCode, resp.Header, out, nil
}

// compress is wire.Compress (gzip, best speed) with one reused writer:
// a fresh gzip writer costs about a megabyte of compressor state, and the
// sender compresses a batch every few milliseconds while it drains.
func (s *Shipper) compress(body []byte) []byte {
	s.gzMu.Lock()
	defer s.gzMu.Unlock()
	var buf bytes.Buffer
	if s.gz == nil {
		s.gz, _ = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	} else {
		s.gz.Reset(&buf)
	}
	_, _ = s.gz.Write(body)
	_ = s.gz.Close()
	return buf.Bytes()
}
