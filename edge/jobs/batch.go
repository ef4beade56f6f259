package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// Op is one transition of a batch: t applied to job ID.
type Op struct {
	ID string
	T  Transition
}

// OpResult is the outcome of one Op: the new event's id, or the error Apply
// would have returned for it (ErrNotFound, ErrFinished, a transport error).
type OpResult struct {
	EventID string
	Err     error
}

// ApplyBatch runs every op exactly as Apply would, each still one atomic
// script, but all of them in one pipelined round trip. Workers use it to
// start and finish the jobs of one XREADGROUP batch together. Results are
// in the order of ops.
func (s *Store) ApplyBatch(ctx context.Context, ops []Op) []OpResult {
	out := make([]OpResult, len(ops))
	if len(ops) == 0 {
		return out
	}
	calls := make([]*transitionCall, len(ops))
	cmds := make([]*redis.Cmd, len(ops))
	// run sends the ops send chooses, EVALSHA or (load) EVAL.
	run := func(load bool, send func(i int) bool) error {
		pipe := s.rdb.Pipeline()
		for i, op := range ops {
			if !send(i) {
				continue
			}
			if calls[i] == nil {
				c, err := s.prepare(op.ID, op.T)
				if err != nil {
					out[i].Err = err
					continue
				}
				calls[i] = c
			}
			if load {
				cmds[i] = transitionScript.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
			} else {
				cmds[i] = transitionScript.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
			}
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	err := run(false, func(int) bool { return true })
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The script cache was flushed (restart, SCRIPT FLUSH): send the
		// source this once; EVAL caches it for the next batch. Only the
		// ops Redis refused are sent again: a flush can land in the middle
		// of the pipeline, and the ops before it ran (a second run would
		// write a second event, or refuse a finish that happened).
		err = run(true, func(i int) bool {
			return cmds[i] != nil && redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT")
		})
	}
	_ = err // per-command errors are read below
	for i, c := range calls {
		if c == nil || cmds[i] == nil {
			continue
		}
		res, err := cmds[i].StringSlice()
		out[i].EventID, out[i].Err = c.interpret(res, err)
	}
	return out
}

// transitionCall is a prepared transitionScript invocation.
type transitionCall struct {
	id, to, evType string
	keys           []string
	args           []any
}

// prepare validates t and builds the script's keys and arguments.
func (s *Store) prepare(id string, t Transition) (*transitionCall, error) {
	var from []string
	if t.To == "" {
		for st := range Transitions.Allowed {
			from = append(from, st)
		}
		if IsTerminal(t.EventType) {
			return nil, fmt.Errorf("job %s: terminal event %q needs a status change", id, t.EventType)
		}
	} else {
		from = Transitions.Sources(t.To)
	}
	evType := t.EventType
	if evType == "" {
		evType = t.To
	}
	if evType == "" {
		return nil, fmt.Errorf("job %s: event needs a type", id)
	}
	data := t.Data
	if len(data) == 0 {
		switch {
		case t.To == Done && len(t.Result) > 0:
			data = t.Result
		case t.To == Error && len(t.Error) > 0:
			data = t.Error
		default:
			data = json.RawMessage(`{}`)
		}
	}
	if t.AckMessageID != "" {
		// XACK refuses a malformed id only once the status and the event
		// are written: a script is not rolled back.
		if _, err := ParseStreamID(t.AckMessageID); err != nil {
			return nil, fmt.Errorf("job %s: acknowledge %.48q: %w", id, t.AckMessageID, err)
		}
	}
	token := t.Token
	if token == "" {
		token = NewToken()
	} else if !validToken(token) {
		return nil, fmt.Errorf("job %s: %w", id, ErrBadToken)
	}
	channel := ""
	if t.Publish {
		channel = CancelChannel(id)
	}
	args := make([]any, 0, 13+len(from))
	args = append(args, t.To, s.nowMS(), evType, t.Step, string(data), string(t.Result), string(t.Error), channel, t.AckMessageID, id, s.Capture, max(s.CaptureMax, 0), token)
	for _, f := range from {
		args = append(args, f)
	}
	return &transitionCall{id: id, to: t.To, evType: evType, keys: []string{JobKey(id), EventsKey(id), QueueStream}, args: args}, nil
}

// interpret turns the script's reply into Apply's result.
func (c *transitionCall) interpret(res []string, err error) (string, error) {
	if err != nil {
		return "", fmt.Errorf("job %s -> %s: %w", c.id, c.evType, err)
	}
	if len(res) == 3 && res[0] == "wrongtype" {
		return "", fmt.Errorf("job %s -> %s: %w", c.id, c.evType, &WrongTypeError{Key: res[1], Type: res[2]})
	}
	if len(res) != 2 {
		return "", fmt.Errorf("job %s: unexpected script reply %q", c.id, res)
	}
	switch res[0] {
	case "ok":
		return res[1], nil
	case "missing":
		return "", fmt.Errorf("job %s: %w", c.id, ErrNotFound)
	case "corrupt":
		return "", fmt.Errorf("job %s: hash/events keys hold %s: %w", c.id, res[1], ErrUnknownStatus)
	}
	to := c.to
	if to == "" {
		to = "(event " + c.evType + ")"
	}
	terr := &lease.TransitionError{Machine: Transitions.Machine, From: res[1], To: to}
	if IsTerminal(res[1]) {
		return "", fmt.Errorf("job %s: %w: %w", c.id, ErrFinished, terr)
	}
	if !IsKnownStatus(res[1]) {
		return "", fmt.Errorf("job %s: %w %q: %w", c.id, ErrUnknownStatus, res[1], terr)
	}
	return "", fmt.Errorf("job %s: %w", c.id, terr)
}

// knownStatuses are the states of Transitions.
var knownStatuses = Transitions.States()

// IsKnownStatus reports whether s is a state of Transitions.
func IsKnownStatus(s string) bool {
	for _, k := range knownStatuses {
		if k == s {
			return true
		}
	}
	return false
}

// IsUnknownStatus reports whether err says the job's status is outside the
// state machine (ErrUnknownStatus): no retry will ever move it, so the
// queue message carrying it must be ended rather than redelivered.
func IsUnknownStatus(err error) bool { return errors.Is(err, ErrUnknownStatus) }

// IsGone reports whether err says there is nothing left to do for a job's
// queue message: the job is finished (ErrFinished) or gone (ErrNotFound).
func IsGone(err error) bool {
	return errors.Is(err, ErrFinished) || errors.Is(err, ErrNotFound)
}
