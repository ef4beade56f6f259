package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Stage is one step of a job type's pipeline: it gets the message and the
// previous stage's output and returns its own. A stage reports a contract
// failure as a *JobError (UPSTREAM_EMPTY from fetch, QUALITY_FAILED from
// quality, …); the last stage's output is the result_ref (a string).
type Stage interface {
	Name() string
	Run(ctx context.Context, m JobMessage, in any) (any, error)
}

// StageFunc adapts a function to Stage.
type StageFunc struct {
	StageName string
	Fn        func(ctx context.Context, m JobMessage, in any) (any, error)
}

// Name is the stage's name.
func (s StageFunc) Name() string { return s.StageName }

// Run runs the function.
func (s StageFunc) Run(ctx context.Context, m JobMessage, in any) (any, error) {
	return s.Fn(ctx, m, in)
}

// Runner executes one job and returns its result_ref, or a *JobError.
type Runner interface {
	Run(ctx context.Context, m JobMessage) (resultRef string, err error)
}

// Pipeline runs its stages in order (fetch → transform → quality →
// storage): the chain stops at the first failure, so nothing after a
// failed fetch or quality check — storage above all — runs.
type Pipeline []Stage

// Run runs the stages; an error that is not a *JobError is reported as
// code STAGE_UNAVAILABLE naming the stage. Once ctx ends no further stage
// starts, and Run returns ctx's error.
func (p Pipeline) Run(ctx context.Context, m JobMessage) (string, error) {
	var v any
	for _, st := range p {
		// A lease fenced during the previous stage ends the chain here,
		// even when that stage ignored its context and returned: the
		// message may be another worker's by now, and a later stage
		// (storage) would write over that run's result.
		if err := ctx.Err(); err != nil {
			return "", err
		}
		out, err := st.Run(ctx, m, v)
		if err != nil {
			var je *JobError
			if errors.As(err, &je) {
				return "", je
			}
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", Fail(CodeStageUnavailable, fmt.Sprintf("stage %s: %v", st.Name(), err))
		}
		v = out
	}
	ref, ok := v.(string)
	if !ok || ref == "" {
		return "", Fail(CodeTransformInvalid, "the last stage returned no result_ref")
	}
	return ref, nil
}

// JobType is a registered job type.
type JobType struct {
	Name   string
	Runner Runner
	// Validate, when set, checks a message of this type at submit (e.g.
	// edge_daily's symbol is an edge id); its error is INVALID_MESSAGE.
	Validate func(m JobMessage) error
}

// Registry holds the job types a process knows: registered in Go and
// configured by EUTERPE_PIPELINE_TYPES.
type Registry struct {
	mu    sync.RWMutex
	types map[string]JobType
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{types: map[string]JobType{}} }

// Register adds t; a name registered twice is an error.
func (r *Registry) Register(t JobType) error {
	if !jobTypeRe.MatchString(t.Name) {
		return fmt.Errorf("pipeline: job type %q: must match %s", t.Name, jobTypeRe)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.types[t.Name]; ok {
		return fmt.Errorf("pipeline: job type %q registered twice", t.Name)
	}
	r.types[t.Name] = t
	return nil
}

// Get returns the type named name.
func (r *Registry) Get(name string) (JobType, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.types[name]
	return t, ok
}

// Names lists the registered types, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.types))
	for n := range r.types {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Check validates m for submission: its type must be registered and its
// own Validate must pass.
func (r *Registry) Check(m JobMessage) error {
	t, ok := r.Get(m.JobType)
	if !ok {
		return invalid("job_type %q is not registered (known: %v)", m.JobType, r.Names())
	}
	if t.Validate != nil {
		if err := t.Validate(m); err != nil {
			if ErrorCode(err) != "" {
				return err
			}
			return invalid("%s", err.Error())
		}
	}
	return nil
}
