package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

const catchUpPage = 200

// streamEvents is GET /v1/jobs/{id}/events: "event: hello", then every
// entry of job:{id}:events after Last-Event-ID (header) or last_event_id
// (query) as id/event/data frames, heartbeat comments in between, ending
// after a terminal event (at once when the job was already finished and
// nothing is left after the cursor), when the job expires, when a piece
// of a write stays blocked for Settings.WriteTimeout, or at server
// shutdown.
func (g *Gateway) streamEvents(c echo.Context) error {
	id, err := jobID(c)
	if err != nil {
		return err
	}
	r := c.Request()
	ctx := r.Context()
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = c.QueryParam("last_event_id")
	}
	var cursor jobs.StreamID
	if last != "" && last != "0" {
		if cursor, err = jobs.ParseStreamID(last); err != nil {
			return bad("invalid_last_event_id", "Last-Event-ID must be a stream entry id like 1700000000000-0")
		}
	}
	status, err := g.store.Redis().HGet(ctx, jobs.JobKey(id), "status").Result()
	if errors.Is(err, redis.Nil) || (err == nil && status == "") {
		return notFound(id)
	}
	if jobs.IsWrongType(err) {
		return statusUnknown(id, "streamed")
	}
	if err != nil {
		return unavailable(fmt.Errorf("job %s status: %w", id, err), g.set.RetryAfter)
	}

	w := c.Response()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, timeout: g.set.WriteTimeout}
	s.frame("", "hello", fmt.Appendf(nil, `{"job_id":%q}`, id))
	if err = s.flush(); err == nil {
		if jobs.IsTerminal(status) {
			// Terminal states have no way out, so nothing can follow the
			// terminal event: send what is after the cursor and end, even
			// when that is nothing (a browser reconnecting after "done").
			err = g.finish(ctx, id, &cursor, s)
		} else {
			err = g.follow(ctx, id, cursor, s, nil)
		}
	}
	if errors.Is(err, jobs.ErrUnknownStatus) {
		// The job's key went from a hash to something else while its
		// events were followed: answered as GET would answer it now.
		g.log.Warn("job key is not a hash", "job_id", id, "err", err)
		s.frame("", "stream_error", fmt.Appendf(nil, `{"job_id":%q,"code":"job_status_unknown","message":"the job is no longer stored as a job hash"}`, id))
		_ = s.flush()
		return nil
	}
	if jobs.IsWrongType(err) || errors.Is(err, ErrNotStream) {
		// Nothing can be read for this job until its events key is a
		// stream again; say so rather than close without a word, which
		// a client could not tell from the end of the job.
		g.log.Warn("job events key is not a stream", "job_id", id, "err", err)
		s.frame("", "stream_error", fmt.Appendf(nil, `{"job_id":%q,"code":"events_not_a_stream","message":"the job's events key holds something other than a stream"}`, id))
		_ = s.flush()
		return nil
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The client stopped reading; holding it would pin its socket's
		// send queue. It resumes with Last-Event-ID. Checked first: the
		// failed write has cancelled the request's context as well.
		g.log.Info("dropped a stalled event stream client", "job_id", id, "write_timeout", g.set.WriteTimeout.String())
	case err == nil, errors.Is(err, errStreamEnd), errors.Is(err, ErrHubClosed), ctx.Err() != nil:
	default:
		g.log.Warn("event stream ended early", "job_id", id, "err", err)
	}
	return nil
}

// Once a job's hash is terminal its terminal event is normally stored
// too: the scripts of package jobs write both at once. A worker of another
// implementation may write them in two steps, status first, so a stream
// that finds the hash terminal and no terminal event waits up to
// terminalGrace for it before it ends without one. It waits on the shared
// reader like any live stream: a stream reading the job's events itself
// until then would keep a connection of the shared pool busy for each of
// its clients.
const terminalGrace = 2 * time.Second

// gracePeriod is terminalGrace unless the settings replace it.
func (g *Gateway) gracePeriod() time.Duration {
	if g.set.terminalGrace != 0 {
		return g.set.terminalGrace
	}
	return terminalGrace
}

// finish ends the stream of a job whose hash is terminal: it sends what is
// stored after cursor and returns errStreamEnd after the terminal event,
// or once the stream's last entry is a terminal event at or before the
// cursor (the client had it already, or its Last-Event-ID is past it);
// else it follows the job for up to terminalGrace.
func (g *Gateway) finish(ctx context.Context, id string, cursor *jobs.StreamID, s *sseWriter) error {
	if err := g.replay(ctx, id, cursor, s); err != nil {
		return err
	}
	ended, err := g.endedAt(ctx, id, *cursor)
	if err != nil {
		return err
	}
	if ended {
		return errStreamEnd
	}
	return g.follow(ctx, id, *cursor, s, time.After(g.gracePeriod()))
}

// endedAt reports whether the last entry of the job's events is a terminal
// event at or before cursor: nothing is left to send.
func (g *Gateway) endedAt(ctx context.Context, id string, cursor jobs.StreamID) (bool, error) {
	msgs, err := g.store.Redis().XRevRangeN(ctx, jobs.EventsKey(id), "+", "-", 1).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("last event of job %s: %w", id, err)
	}
	if len(msgs) == 0 {
		return false, nil
	}
	last, err := jobs.ParseStreamID(msgs[0].ID)
	if err != nil {
		return false, err
	}
	typ, _ := msgs[0].Values["type"].(string)
	return jobs.IsTerminal(typ) && !cursor.Less(last), nil
}

// replay sends the stored events of a job after cursor, up to its
// terminal event (then it returns errStreamEnd), moving the cursor.
func (g *Gateway) replay(ctx context.Context, id string, cursor *jobs.StreamID, s *sseWriter) error {
	for {
		evs, err := g.store.Events(ctx, id, cursor.String(), catchUpPage)
		if err != nil {
			return err
		}
		from := *cursor
		for _, ev := range evs {
			if err := s.event(cursor, ev); err != nil {
				return err
			}
		}
		// A page that moved the cursor nowhere would be fetched again
		// for ever.
		if len(evs) < catchUpPage || *cursor == from {
			return nil
		}
	}
}

var errStreamEnd = errors.New("stream ended")

// follow sends events after cursor until a terminal one, or until grace
// fires (nil: never, unless a heartbeat finds the job's hash terminal). A
// subscription the hub dropped because this client was slow is resumed
// from the cursor.
func (g *Gateway) follow(ctx context.Context, id string, cursor jobs.StreamID, s *sseWriter, grace <-chan time.Time) error {
	beat := time.NewTicker(g.set.Heartbeat)
	defer beat.Stop()
	for {
		sub, err := g.hub.Subscribe(ctx, id, cursor)
		if err != nil {
			return err
		}
		err = g.pump(ctx, sub, &cursor, s, beat.C, &grace)
		g.hub.Unsubscribe(sub)
		if !errors.Is(err, ErrLagged) {
			return err
		}
	}
}

// pump sends sub's events. Once *grace is set (a nil channel never fires)
// the job's hash is known to be terminal: its terminal event ends the
// stream as usual, and *grace firing first ends it after what Redis holds
// by then, terminal event or not.
func (g *Gateway) pump(ctx context.Context, sub *Sub, cursor *jobs.StreamID, s *sseWriter, beat <-chan time.Time, grace *<-chan time.Time) error {
	// Catch up from Redis to where the shared reader was when we joined.
	// Entries after CatchUpTo come live; once a page reaches past it (or
	// the stream ends) everything up to it has been sent, so the cursor
	// moves to CatchUpTo even when no entry sits exactly there — a page
	// that makes no progress must not be fetched again.
	for sub.CatchUpTo != (jobs.StreamID{}) && cursor.Less(sub.CatchUpTo) {
		evs, err := g.store.Events(ctx, sub.Job, cursor.String(), catchUpPage)
		if err != nil {
			return err
		}
		past := false
		for _, ev := range evs {
			if sub.CatchUpTo.Less(jobs.MustStreamID(ev.ID)) {
				past = true
				break
			}
			if err := s.event(cursor, ev); err != nil {
				return err
			}
		}
		if past || len(evs) < catchUpPage {
			if cursor.Less(sub.CatchUpTo) {
				*cursor = sub.CatchUpTo
			}
			break
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-sub.C:
			if !ok {
				return sub.Err()
			}
			if err := s.entry(cursor, e); err != nil {
				return err
			}
		case <-*grace:
			// The shared reader may not have read the job's stream yet
			// (a new feed joins its next XREAD, which can come after a
			// whole readBlock): what Redis holds decides, once.
			if err := g.replay(ctx, sub.Job, cursor, s); err != nil {
				return err
			}
			g.log.Info("job finished without a terminal event; ending its event stream", "job_id", sub.Job)
			return errStreamEnd
		case <-beat:
			s.comment("heartbeat")
			if err := s.flush(); err != nil {
				return err
			}
			if *grace != nil {
				continue // the hash is terminal: only the event is awaited
			}
			status, err := g.store.Redis().HGet(ctx, jobs.JobKey(sub.Job), "status").Result()
			switch {
			case errors.Is(err, redis.Nil):
				return errStreamEnd // expired without a terminal event
			case jobs.IsWrongType(err):
				// Not the events key's fault: left unwrapped so the
				// client is not told its events key is bad.
				return fmt.Errorf("status of job %s: key holds another type: %w", sub.Job, jobs.ErrUnknownStatus)
			case err == nil && jobs.IsTerminal(status):
				// The terminal entry may never come live to this
				// subscriber: it joined after the reader had passed it,
				// with a Last-Event-ID ahead of the stream. Or it is not
				// stored yet (a two-step writer): it comes live, within
				// the grace.
				ended, err := g.endedAt(ctx, sub.Job, *cursor)
				if err != nil {
					return err
				}
				if ended {
					return errStreamEnd
				}
				*grace = time.After(g.gracePeriod())
			}
		}
	}
}

// sseWriter writes Server-Sent Event frames and flushes them.
type sseWriter struct {
	w   *echo.Response
	buf []byte
	// timeout, when not 0, is the write deadline of every piece a flush
	// writes: a client that stops reading fills the socket's buffers, the
	// write blocks, and the deadline ends it with os.ErrDeadlineExceeded.
	timeout time.Duration
}

// writePiece is the most a flush writes under one deadline. A done event
// carries the job's whole result (tens of MiB for a chat answer), which a
// client reading steadily but slowly cannot take in within one timeout:
// under a single deadline it would be cut mid-frame, and cut again at the
// same frame after every resume. Each piece gets the timeout afresh
// instead, so a client is dropped only when it stops making progress —
// a piece not taken within the timeout — and one that trickles a few
// bytes a timeout cannot hold its connection through a large frame.
const writePiece = 64 << 10

// keptBuffer is the largest buffer a stream keeps between flushes: one
// that grew for a large frame is left to the collector.
const keptBuffer = 1 << 20

// event sends ev unless the cursor is already at or past it, moves the
// cursor, and returns errStreamEnd after a terminal event.
func (s *sseWriter) event(cursor *jobs.StreamID, ev jobs.Event) error {
	return s.send(cursor, ev, func() error {
		data, _ := json.Marshal(ev)
		s.frame(ev.ID, ev.Type, data)
		return s.flush()
	})
}

// entry is event for an entry of the shared reader: the frame all its
// subscribers send is built once, by the first to send it, and each
// writes it from there rather than from a copy of its own.
func (s *sseWriter) entry(cursor *jobs.StreamID, e *Entry) error {
	return s.send(cursor, e.Event, func() error {
		e.once.Do(func() {
			data, _ := json.Marshal(e.Event)
			e.frame = appendFrame(make([]byte, 0, len(data)+len(e.ID)+len(e.Type)+32), e.ID, e.Type, data)
		})
		return s.flushWith(e.frame)
	})
}

// send is event and entry, with write sending the frame.
func (s *sseWriter) send(cursor *jobs.StreamID, ev jobs.Event, write func() error) error {
	eid := jobs.MustStreamID(ev.ID)
	if !cursor.Less(eid) {
		// Already sent — or the client's Last-Event-ID is past it. A
		// terminal event still ends the stream: the job is over either way.
		if jobs.IsTerminal(ev.Type) {
			return errStreamEnd
		}
		return nil
	}
	if err := write(); err != nil {
		return err
	}
	*cursor = eid
	if jobs.IsTerminal(ev.Type) {
		return errStreamEnd
	}
	return nil
}

// frame appends one event to the buffer.
func (s *sseWriter) frame(id, event string, data []byte) {
	s.buf = appendFrame(s.buf, id, event, data)
}

// appendFrame appends one event to buf. A CR or LF ends an SSE line
// wherever it appears, so a value carrying one could forge fields or whole
// events (an event type is whatever a worker wrote to the stream, and a
// forged "done" would end the client's stream): id and event are kept to
// one line, each CR and LF replaced by U+FFFD (a name no real type has,
// while the entry in data still carries the type as stored), and data
// lines go out as data fields of their own, which clients join back with
// LF.
func appendFrame(buf []byte, id, event string, data []byte) []byte {
	if id != "" {
		buf = append(buf, "id: "...)
		buf = appendOneLine(buf, id)
		buf = append(buf, '\n')
	}
	buf = append(buf, "event: "...)
	buf = appendOneLine(buf, event)
	buf = append(buf, '\n')
	// data is JSON, whose encoders escape line breaks: two vectorised
	// scans find none, and the loop below is for what another writer of
	// the stream may have stored.
	for bytes.IndexByte(data, '\n') >= 0 || bytes.IndexByte(data, '\r') >= 0 {
		i := bytes.IndexAny(data, "\r\n")
		buf = append(buf, "data: "...)
		buf = append(buf, data[:i]...)
		buf = append(buf, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	return buf
}

// appendOneLine appends v with every CR and LF replaced by U+FFFD.
func appendOneLine(buf []byte, v string) []byte {
	for {
		i := strings.IndexAny(v, "\r\n")
		if i < 0 {
			return append(buf, v...)
		}
		buf = append(buf, v[:i]...)
		buf = append(buf, "\uFFFD"...)
		v = v[i+1:]
	}
}

func (s *sseWriter) comment(text string) {
	s.buf = append(s.buf, ": "...)
	s.buf = append(s.buf, text...)
	s.buf = append(s.buf, "\n\n"...)
}

// flush writes the buffered frames in pieces of writePiece bytes, each
// under a deadline of its own, and flushes them to the client.
func (s *sseWriter) flush() error { return s.flushWith(nil) }

// flushWith is flush with frame written after the buffered frames, as it
// is: other streams share it, and it may be large.
func (s *sseWriter) flushWith(frame []byte) error {
	if len(s.buf) == 0 && len(frame) == 0 {
		return nil
	}
	rc := http.NewResponseController(s.w.Writer)
	err := s.writePieces(rc, s.buf)
	if err == nil {
		err = s.writePieces(rc, frame)
	}
	if cap(s.buf) > keptBuffer {
		s.buf = nil
	} else {
		s.buf = s.buf[:0]
	}
	if err != nil {
		return err
	}
	// What the response still buffers is less than a piece.
	if err := s.deadline(rc); err != nil {
		return err
	}
	return rc.Flush()
}

func (s *sseWriter) writePieces(rc *http.ResponseController, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), writePiece)
		if err := s.deadline(rc); err != nil {
			return err
		}
		if _, err := s.w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// deadline gives the next write the whole timeout from now.
func (s *sseWriter) deadline(rc *http.ResponseController) error {
	if s.timeout <= 0 {
		return nil
	}
	err := rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
