package inbox

import (
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// ErrNotFound is returned for an unknown job id.
var ErrNotFound = errors.New("inbox: job not found")

// ErrForbidden is returned when a job belongs to another requester.
var ErrForbidden = errors.New("inbox: job belongs to another requester")

// ErrFinished is returned when a finished job's credentials are updated.
var ErrFinished = errors.New("inbox: job already finished")

// ErrSourceMismatch is returned when new credentials do not fit the job's
// source: S3 credentials for a job that fetches a URL, a URL for a job
// that reads a bucket, or a URL naming another object than the job's. A
// refresh renews access to the job's source; it never changes what the
// job transcodes.
var ErrSourceMismatch = errors.New("inbox: the credentials do not fit the job's source")

// ErrCredentialConflict is returned when another update of a job's
// credentials committed between this one's read and its write.
var ErrCredentialConflict = errors.New("inbox: job credentials changed concurrently")

// ErrPruned is returned for a job whose details were removed by retention.
var ErrPruned = errors.New("inbox: job pruned by retention")

// Source is where a job reads its input, in plaintext routing form: either
// URL (a signed URL with its query string removed; the full URL lives in the
// sealed credentials) or Bucket/Key with optional Endpoint/Region.
type Source struct {
	URL      string `json:"url,omitempty"`
	Bucket   string `json:"bucket,omitempty"`
	Key      string `json:"key,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Region   string `json:"region,omitempty"`
}

// Output is where a job writes its renditions.
type Output struct {
	Bucket   string `json:"bucket"`
	Prefix   string `json:"prefix"`
	Endpoint string `json:"endpoint,omitempty"`
	Region   string `json:"region,omitempty"`
}

// Rendition is one requested output encoding.
type Rendition struct {
	Name         string `json:"name"`
	Codec        string `json:"codec"`
	BitrateKbps  int    `json:"bitrate_kbps,omitempty"`
	SampleRateHz int    `json:"sample_rate_hz,omitempty"`
	Channels     int    `json:"channels,omitempty"`
	Container    string `json:"container,omitempty"`
}

// OutputFile describes one uploaded rendition of a succeeded job.
type OutputFile struct {
	Rendition    string `json:"rendition"`
	Bucket       string `json:"bucket"`
	Key          string `json:"key"`
	SizeBytes    int64  `json:"size_bytes"`
	ContentType  string `json:"content_type,omitempty"`
	Codec        string `json:"codec,omitempty"`
	Container    string `json:"container,omitempty"`
	BitrateKbps  int    `json:"bitrate_kbps,omitempty"`
	SampleRateHz int    `json:"sample_rate_hz,omitempty"`
	Channels     int    `json:"channels,omitempty"`
	DurationMS   int64  `json:"duration_ms,omitempty"`
	Checksum     string `json:"checksum,omitempty"` // "sha256:<hex>" of the object
}

// ErrorBody is the normalized error of failed and dead_letter jobs.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// NewJob is a job to insert; Credentials are sealed before they are stored.
type NewJob struct {
	ID               string
	RequesterID      string
	IdempotencyKey   string
	Source           Source
	Output           Output
	Renditions       []Rendition
	StatusWebhookURL string
	RefreshURL       string
	Metadata         json.RawMessage
	Priority         int
	ScheduledAt      time.Time // zero: now
	MaxAttempts      int       // zero: the store's policy
	Credentials      credentials.Storage
}

// Job is an executor's hold on one claimed job: the lease claim it fences
// every write with, plus what the executor needs to do the work.
//
// A Job may be shared by the goroutine doing the work and the one
// heartbeating its lease; the Store's methods serialise their access to the
// claim, so both may call them at once.
type Job struct {
	lease.Claim
	mu                sync.Mutex
	RequesterID       string
	MaxAttempts       int
	CredentialVersion int
	RefreshAttempts   int
	Source            Source
	Output            Output
	Renditions        []Rendition
	StatusWebhookURL  string
	RefreshURL        string
	Metadata          json.RawMessage
	// metadataEnc is Metadata encoded once for the job's events, set where
	// a claim loads the job (jobRow.apply).
	metadataEnc encodedRaw
}

// View is a job as GET /transcode/status shows it. It has no credential
// field, so no code path can put one in a status response.
type View struct {
	JobID             string          `json:"job_id"`
	RequesterID       string          `json:"-"`
	Status            string          `json:"status"`
	CreatedAt         time.Time       `json:"created_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
	ScheduledAt       time.Time       `json:"scheduled_at"`
	NextAttemptAt     *time.Time      `json:"next_attempt_at,omitempty"`
	StartedAt         *time.Time      `json:"started_at,omitempty"`
	FinishedAt        *time.Time      `json:"finished_at,omitempty"`
	AttemptCount      int             `json:"attempt_count"`
	MaxAttempts       int             `json:"max_attempts"`
	ClaimVersion      int64           `json:"claim_version"`
	CredentialVersion int             `json:"credential_version"`
	WorkerID          *string         `json:"worker_id"`
	LeaseExpiresAt    *time.Time      `json:"lease_expires_at"`
	LastError         *ErrorBody      `json:"last_error"`
	Outputs           json.RawMessage `json:"outputs,omitempty"`
	Metadata          json.RawMessage `json:"metadata,omitempty"`
	Pruned            bool            `json:"-"`
}

// JobError is a failure reported by an executor. Message is capped at 512
// characters and must not contain credentials.
type JobError struct {
	Class   Class
	Code    string
	Message string
}

func (e JobError) Error() string { return e.Code + ": " + e.Message }

// claim returns a copy of j's claim under its lock.
func (j *Job) claim() lease.Claim {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.Claim
}

// commitClaim stores what a committed write changed of j's claim (status,
// sequence, fencing version, attempt), keeping the lease expiry a
// concurrent heartbeat may have extended meanwhile.
func (j *Job) commitClaim(c lease.Claim) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.Status, j.Seq, j.Version, j.Attempt = c.Status, c.Seq, c.Version, c.Attempt
}

// Snapshot returns a copy of the claim (status, version, sequence, lease
// expiry) safe to read while another goroutine heartbeats the job.
func (j *Job) Snapshot() lease.Claim { return j.claim() }
