package outbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/ssrf"
	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// Dispatcher claims due outbox events and delivers them. Run it once per
// process; any number of processes may share one database.
type Dispatcher struct {
	cfg     Config
	store   *Store
	secrets SecretSource
	client  *http.Client
	log     *slog.Logger
	worker  string
	metrics *Metrics
	backoff lease.Backoff
	now     func() time.Time
	wake    chan struct{}
	records chan recordReq
}

// recordReq is one outcome waiting for the recorder.
type recordReq struct {
	op   Op
	done chan error
}

// maxRecordBatch bounds the outcomes written in one transaction.
const maxRecordBatch = 64

// Options are a Dispatcher's collaborators. Store, Secrets and Worker are
// required; the rest have defaults.
type Options struct {
	Store   *Store
	Secrets SecretSource
	Worker  string
	Log     *slog.Logger
	Metrics *Metrics
	// Client overrides the SSRF-guarded client (never in production).
	Client *http.Client
	Now    func() time.Time
}

// New returns a Dispatcher; cfg is validated.
func New(cfg Config, o Options) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Store == nil || o.Secrets == nil || o.Worker == "" {
		return nil, errors.New("outbox: dispatcher needs a store, a secret source and a worker id")
	}
	d := &Dispatcher{
		cfg: cfg, store: o.Store, secrets: o.Secrets, worker: o.Worker,
		log: o.Log, metrics: o.Metrics, client: o.Client, now: o.Now,
		backoff: lease.Backoff{Base: cfg.BackoffBase, Cap: cfg.BackoffMax},
		wake:    make(chan struct{}, 1),
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.metrics == nil {
		d.metrics = NewMetrics(nil)
	}
	if d.client == nil {
		d.client = ssrf.Policy{AllowPrivate: cfg.AllowPrivate}.NewClient(ssrf.ClientOptions{
			Timeout: cfg.Timeout, MaxConnsPerHost: cfg.Concurrency * 2,
		})
	}
	if d.now == nil {
		d.now = time.Now
	}
	return d, nil
}

// Wake asks for a claim now instead of at the next poll. It never blocks.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run claims and delivers until ctx ends, then lets sends in flight finish
// (each bounded by the request timeout), returns events it claimed but had
// not started to pending, and returns. Database errors are logged and
// retried at the next poll.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.records = make(chan recordReq, maxRecordBatch)
	recDone := make(chan struct{})
	go func() { defer close(recDone); d.recorder(context.WithoutCancel(ctx)) }()
	defer func() { close(d.records); <-recDone }() // after every handler is done
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wg.Add(1)
	go func() { defer wg.Done(); d.watch(wctx) }()

	// slots bounds claimed-but-unfinished events: one batch waiting behind
	// the sends in flight. sends bounds the requests in flight.
	slots := make(chan struct{}, d.cfg.Concurrency+d.cfg.Batch)
	sends := make(chan struct{}, d.cfg.Concurrency)
	freed := make(chan struct{}, 1)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		woken := false
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-d.wake:
			woken = true
		case <-freed:
		}
		claimed := 0
		for ctx.Err() == nil {
			room := cap(slots) - len(slots)
			if room > d.cfg.Batch {
				room = d.cfg.Batch
			}
			if room < 1 || room < d.cfg.Batch && len(slots) > d.cfg.Concurrency {
				break // a fuller claim is worth waiting for a slot
			}
			events, err := d.store.Claim(ctx, d.worker, room, d.cfg.LeaseTTL)
			if err != nil {
				if ctx.Err() == nil {
					d.log.Warn("outbox claim failed", "err", err)
				}
				break
			}
			claimed += len(events)
			for _, e := range events {
				slots <- struct{}{}
				wg.Add(1)
				go func(e *Event) {
					defer wg.Done()
					defer func() {
						<-slots
						select {
						case freed <- struct{}{}:
						default:
						}
					}()
					d.handle(ctx, e, sends)
				}(e)
			}
			if len(events) < room {
				break // drained what is due
			}
		}
		next := d.pollInterval()
		if woken && claimed == 0 && ctx.Err() == nil {
			next = min(next, d.untilDue(ctx))
		}
		timer.Reset(next)
	}
}

// untilDue is how long until the earliest pending event is due, or
// PollMax when none is due later. A wake-up that claims nothing is most
// often for an event another pod committed with its estimate of the
// database clock a few milliseconds ahead of this one's: due by the
// committing pod's clock, not yet by this one's, and without this it
// would wait for the next poll.
func (d *Dispatcher) untilDue(ctx context.Context) time.Duration {
	at, ok, err := d.store.NextDue(ctx)
	if err != nil || !ok {
		return d.cfg.PollMax
	}
	if wait := at.Sub(d.store.now()); wait > 0 {
		return wait
	}
	return d.cfg.PollMax // due, and yet not claimed: held back behind an earlier event of its job
}

func (d *Dispatcher) pollInterval() time.Duration {
	lo, hi := d.cfg.PollMin, d.cfg.PollMax
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rand.Int64N(int64(hi-lo)))
}

// handle delivers one claimed event under its lease.
func (d *Dispatcher) handle(ctx context.Context, e *Event, sends chan struct{}) {
	// Recording an outcome must survive shutdown: a send that happened is
	// recorded even while the process stops.
	bg := context.WithoutCancel(ctx)
	err := lease.Keep(bg, d.cfg.LeaseTTL,
		func(c context.Context) error { return d.store.Heartbeat(c, e, d.cfg.LeaseTTL) },
		func(lctx context.Context) error {
			select {
			case sends <- struct{}{}:
			case <-ctx.Done():
				return d.record(d.store.ReleaseOp(e))
			case <-lctx.Done():
				return context.Cause(lctx)
			}
			defer func() { <-sends }()
			// select picks at random among ready cases: with a slot free and
			// shutdown begun, the slot may have won. An unstarted send is
			// not in flight, so it goes back like the others.
			if ctx.Err() != nil {
				return d.record(d.store.ReleaseOp(e))
			}
			return d.deliver(lctx, e)
		},
		lease.OnRenewError(func(err error) {
			d.log.Warn("outbox lease renewal failed; retrying at the next heartbeat",
				"event_id", e.ID, "job_id", e.JobID, "lease_ttl", d.cfg.LeaseTTL, "err", err)
		}),
		lease.Until(e.Deadline))
	if err != nil {
		if errors.Is(err, lease.ErrStale) {
			d.log.Warn("outbox lease lost or not renewed in time; left to the dispatcher that reclaims it", "event_id", e.ID, "job_id", e.JobID, "err", err)
			return
		}
		d.log.Warn("outbox delivery not recorded; the lease will expire and the event will be retried",
			"event_id", e.ID, "job_id", e.JobID, "err", err)
	}
}

// deliver sends one attempt and records its outcome, fenced. Every failed
// attempt, whether or not a request left (an unopenable signing secret
// too), goes through the same attempt and age limits.
func (d *Dispatcher) deliver(ctx context.Context, e *Event) error {
	rec := context.WithoutCancel(ctx)
	secrets, err := d.secrets.Secrets(ctx, e.RequesterID, d.now())
	var o Outcome
	switch {
	case errors.Is(err, ErrRequesterDisabled):
		return d.deadLetter(rec, e, Outcome{Action: DeadLetter, Reason: "requester disabled or unknown"})
	case err != nil:
		// The event spends its attempts like any failure instead of
		// blocking its job's later events forever. A removed KEK or a
		// corrupt blob will not heal by itself: the operator has to act, so
		// every such attempt alerts. A failed read (the database, or the
		// lease ending) heals by itself and must not page anyone.
		o = Outcome{Action: Retry, Reason: daemon.CapMessage("signing secret unavailable: " + err.Error())}
		if errors.Is(err, requesters.ErrSecretUnopenable) {
			d.log.Error("webhook signing secret cannot be opened", "alert", true, "event_id", e.ID, "job_id", e.JobID,
				"requester_id", e.RequesterID, "attempt", e.Attempt, "cause", err.Error())
		} else {
			d.log.Warn("webhook signing secret could not be read", "event_id", e.ID, "job_id", e.JobID,
				"requester_id", e.RequesterID, "attempt", e.Attempt, "err", err.Error())
		}
	case e.URL == "":
		return d.deadLetter(rec, e, Outcome{Action: DeadLetter, Reason: "event has no webhook URL"})
	default:
		o = d.send(ctx, e, secrets)
		d.metrics.Attempts.WithLabelValues(o.Action.String()).Inc()
	}
	switch o.Action {
	case Deliver:
		if err := d.record(d.store.DeliveredOp(e, o.StatusCode)); err != nil {
			return err
		}
		d.metrics.Lag.Observe(d.store.Now().Sub(e.CreatedAt).Seconds())
		d.log.Debug("outbox event delivered", "event_id", e.ID, "job_id", e.JobID, "sequence", e.Sequence, "attempt", e.Attempt, "status_code", o.StatusCode)
		d.Wake() // the job's next event may be waiting for this one
		return nil
	case DeadLetter:
		return d.deadLetter(rec, e, o)
	}
	if e.Attempt >= d.cfg.MaxAttempts || d.store.Now().Sub(e.AgeFrom) >= d.cfg.MaxAge {
		o.Reason = daemon.CapMessage("retries exhausted: " + o.Reason)
		return d.deadLetter(rec, e, o)
	}
	return d.retry(rec, e, o)
}

func (d *Dispatcher) retry(ctx context.Context, e *Event, o Outcome) error {
	wait := d.backoff.Delay(e.Attempt)
	if o.Action == RetryAfter {
		// The larger bucket (contract §5): with a floor, so a receiver
		// asking us to slow down never gets a retry sooner than a plain
		// failure's longest wait. Retry-After is a least wait (RFC 9110):
		// a longer one is honoured up to BackoffMax, a shorter one does not
		// bring the retry forward.
		wait = max(d.backoff.Larger(e.Attempt), min(o.Wait, d.cfg.BackoffMax))
	}
	d.log.Info("outbox delivery failed; will retry", "event_id", e.ID, "job_id", e.JobID, "attempt", e.Attempt,
		"status_code", o.StatusCode, "reason", o.Reason, "retry_in", wait.String())
	return d.record(d.store.RetryOp(e, d.store.Now().Add(wait), o.StatusCode, o.Reason))
}

func (d *Dispatcher) deadLetter(ctx context.Context, e *Event, o Outcome) error {
	if err := d.record(d.store.DeadLetterOp(e, o.StatusCode, o.Reason)); err != nil {
		return err
	}
	// The alert before the counter: whoever sees the count (a test, a
	// scrape) finds the line that names the event already written.
	d.log.Error("outbox event dead-lettered", "alert", true, "event_id", e.ID, "job_id", e.JobID,
		"sequence", e.Sequence, "attempt", e.Attempt, "status_code", o.StatusCode, "reason", o.Reason,
		"host", hostOf(e.URL))
	d.metrics.DeadLetters.Inc()
	d.Wake() // later events of the job are no longer held back
	return nil
}

// record hands an outcome to the recorder and waits until it is written.
func (d *Dispatcher) record(op Op) error {
	done := make(chan error, 1)
	d.records <- recordReq{op: op, done: done}
	return <-done
}

// recorder writes outcomes, as many as are waiting (up to maxRecordBatch)
// in one transaction: one commit for many deliveries under load, no added
// wait when idle.
func (d *Dispatcher) recorder(ctx context.Context) {
	batch := make([]recordReq, 0, maxRecordBatch)
	ops := make([]Op, 0, maxRecordBatch)
	for r := range d.records {
		batch = append(batch[:0], r)
	drain:
		for len(batch) < maxRecordBatch {
			select {
			case r2, ok := <-d.records:
				if !ok {
					break drain
				}
				batch = append(batch, r2)
			default:
				break drain
			}
		}
		ops = ops[:0]
		for _, b := range batch {
			ops = append(ops, b.op)
		}
		for i, err := range d.store.Apply(ctx, ops) {
			batch[i].done <- err
		}
	}
}

// send makes one signed attempt and classifies it. The response body is
// read up to 512 bytes for the record (secret URL parts redacted) and drained a little for reuse.
func (d *Dispatcher) send(ctx context.Context, e *Event, secrets [][]byte) Outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(e.Payload))
	if err != nil {
		return Outcome{Action: DeadLetter, Reason: "invalid webhook URL"}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "euterpe-webhooks/"+daemon.Version)
	if err := webhook.SetHeaders(req, d.now(), e.ID, e.Payload, secrets...); err != nil {
		return Outcome{Action: Retry, Reason: "signing failed"}
	}
	start := time.Now()
	resp, err := d.client.Do(req)
	d.metrics.Latency.Observe(time.Since(start).Seconds())
	if err != nil {
		return classify(0, nil, err, d.now())
	}
	defer resp.Body.Close()
	o := classify(resp.StatusCode, resp.Header, nil, d.now())
	if o.Action != Deliver {
		if snippet := errorSnippet(resp.Body, e.URL); snippet != "" {
			o.Reason = daemon.CapMessage(o.Reason + ": " + snippet)
		}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return o
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}
