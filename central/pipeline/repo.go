package pipeline

import (
	"context"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
)

// Queue is the contract's queue (§3.1). Enqueue makes a created job's
// message visible to workers; message_id is the job id (the row is the
// message).
type Queue interface {
	Enqueue(ctx context.Context, m JobMessage) (EnqueueResult, error)
	Ping(ctx context.Context) error
}

// EnqueueResult is §3.1's success answer.
type EnqueueResult struct {
	MessageID string    `json:"message_id"`
	VisibleAt time.Time `json:"visible_at"`
}

// Repo is the contract's job repo (§4.1). The status writes take the
// worker's lease (Job): each is fenced on its claim_version, so a worker
// whose message reappeared elsewhere cannot overwrite the new run.
type Repo interface {
	CreateQueued(ctx context.Context, m JobMessage) (Created, error)
	SetRunning(ctx context.Context, j *Job, startedAt time.Time) error
	SetSucceeded(ctx context.Context, j *Job, finishedAt time.Time, resultRef string) error
	SetFailed(ctx context.Context, j *Job, finishedAt time.Time, f *JobError, attempt int) error
	SetDeadLetter(ctx context.Context, j *Job, finishedAt time.Time, f *JobError, attempt int) error
	GetByID(ctx context.Context, jobID string) (JobRecord, error)
	GetByIdempotency(ctx context.Context, key string) (string, bool, error)
	Ping(ctx context.Context) error
}

// Created is create_queued's answer.
type Created struct {
	JobID   string `json:"job_id"`
	Created bool   `json:"created"`
	Status  string `json:"status"`
}

// Job is a claimed job: the worker's lease and the message.
type Job struct {
	lease.Claim
	Msg JobMessage
}

// LastError is the last failure recorded on a job.
type LastError struct {
	ErrorCode    string `json:"error_code"`
	ErrorMessage string `json:"error_message"`
	Attempt      int    `json:"attempt"`
}

// JobRecord is get_by_id's answer and the API's job resource.
type JobRecord struct {
	JobID          string     `json:"job_id"`
	IdempotencyKey string     `json:"idempotency_key"`
	JobType        string     `json:"job_type"`
	Symbol         string     `json:"symbol"`
	Asof           string     `json:"asof"`
	RequestedBy    string     `json:"requested_by"`
	Status         string     `json:"status"`
	Attempts       int        `json:"attempts"`
	MaxAttempts    int        `json:"max_attempts"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	VisibleAt      *time.Time `json:"visible_at,omitempty"`
	StartedAt      *time.Time `json:"started_at,omitempty"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
	LastError      *LastError `json:"last_error,omitempty"`
	ResultRef      string     `json:"result_ref,omitempty"`
}
