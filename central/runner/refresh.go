package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon"
)

// RefreshRequest is the body POSTed to a job's refresh_url when storage
// rejected its credentials. The requester answers by calling
// PUT /transcode/credentials?job_id=… with new credentials.
type RefreshRequest struct {
	Type              string    `json:"type"` // always "credentials.refresh"
	JobID             string    `json:"job_id"`
	CredentialVersion int       `json:"credential_version"` // the version that was rejected
	Operation         string    `json:"operation"`          // "fetch" or "upload"
	StorageStatus     int       `json:"storage_status"`     // 401 or 403
	RefreshAttempt    int       `json:"refresh_attempt"`
	RequestedAt       time.Time `json:"requested_at"`
}

// refresher signs and sends refresh requests.
type refresher struct {
	client *http.Client
	now    func() time.Time
}

// call POSTs req to url signed with the requester's webhook secrets
// (current first). A 2xx answer means the requester accepted the request;
// it does not mean credentials changed, which the runner checks itself.
func (r refresher) call(ctx context.Context, url string, req RefreshRequest, secrets [][]byte) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		// A URL that does not parse is quoted whole in the error, its
		// user info and query (where a token may be) included.
		return fmt.Errorf("refresh_url: %w", scrub(err))
	}
	hreq.Header.Set("Content-Type", "application/json")
	eventID := fmt.Sprintf("refresh-%s-v%d-%d", req.JobID, req.CredentialVersion, req.RefreshAttempt)
	if err := webhook.SetHeaders(hreq, r.now(), eventID, body, secrets...); err != nil {
		return fmt.Errorf("sign refresh request: %w", err)
	}
	resp, err := r.client.Do(hreq)
	if err != nil {
		return fmt.Errorf("refresh_url: %w", scrub(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("refresh_url answered HTTP %d", resp.StatusCode)
	}
	return nil
}

// scrub drops the query string (which may hold a token) from URL errors.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		u, perr := url.Parse(ue.URL)
		if perr == nil {
			u.RawQuery, u.User = "", nil
			return &url.Error{Op: ue.Op, URL: u.String(), Err: ue.Err}
		}
		return &url.Error{Op: ue.Op, URL: "(refresh_url)", Err: ue.Err}
	}
	return err
}

// withRefresh runs op with the job's current credentials. When storage
// rejects them (401/403) it runs the refresh flow of contract §7: count a
// refresh attempt against the job's budget, call refresh_url signed with
// the requester's webhook secret and wait for credential_version to
// advance; op runs again only once it has (the credentials storage refused
// are never retried). A refresh that leaves the version where it was is
// followed by the next counted refresh attempt. When the budget is spent
// or the job has no refresh_url, the attempt fails with
// ErrRefreshExhausted and takes the normal retry path.
//
// The refresh flow is bounded (the budget times RefreshWait) and touches wd
// while it waits, so waiting for a requester is not taken for a stall.
func (r *Runner) withRefresh(ctx context.Context, j *inbox.Job, wd *watchdog, opName string, op func(credentials.Storage) error) error {
	for {
		creds, version, err := r.jobs.Credentials(ctx, j)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: %v", errCredentials, err)
		}
		err = op(creds)
		creds = credentials.Storage{} // drop the plaintext as soon as possible
		if err == nil {
			return nil
		}
		var se *storage.Error
		if ctx.Err() != nil || !errors.As(err, &se) || se.Class() != storage.Auth {
			return err
		}
		if j.RefreshURL == "" {
			return fmt.Errorf("%w (no refresh_url): %w", ErrRefreshExhausted, err)
		}
		if err := r.refreshUntilAdvanced(ctx, j, wd, opName, se.Status, version, err); err != nil {
			return err
		}
		// credential_version advanced: op runs again with the new credentials.
	}
}

// refreshUntilAdvanced runs refresh attempts, each counted against the
// job's budget (the inbox policy's MaxRefreshAttempts,
// EUTERPE_MAX_REFRESH_ATTEMPTS), until credential_version moves past
// version. rejected is the storage error that started the flow; it is
// wrapped in ErrRefreshExhausted when the budget runs out first.
func (r *Runner) refreshUntilAdvanced(ctx context.Context, j *inbox.Job, wd *watchdog, opName string, status, version int, rejected error) error {
	// The requester may have sent new credentials on its own between the
	// read and storage's refusal (its own rotation, or its answer to an
	// earlier call arriving late): op runs again with them, and no refresh
	// unit of the job's budget is spent on a call nobody needs.
	if v, err := r.jobs.CredentialVersion(ctx, j.ID); err == nil && v > version {
		return nil
	}
	for {
		allowed, err := r.jobs.CountRefreshAttempt(ctx, j)
		if err != nil {
			return err
		}
		if !allowed {
			return fmt.Errorf("%w (refresh budget spent): %w", ErrRefreshExhausted, rejected)
		}
		advanced, err := r.requestRefresh(ctx, j, wd, opName, status, version)
		if err != nil {
			return err
		}
		if advanced {
			r.metrics.Refreshes.WithLabelValues("refreshed").Inc()
			return nil
		}
		r.metrics.Refreshes.WithLabelValues("not_refreshed").Inc()
		r.log.Warn("credentials not refreshed", "job_id", j.ID, "credential_version", version, "refresh_attempt", j.RefreshAttempts)
	}
}

// requestRefresh calls refresh_url and waits up to RefreshWait for the
// job's credential_version to move past version. Only a lost lease or a
// shutdown is returned as an error.
func (r *Runner) requestRefresh(ctx context.Context, j *inbox.Job, wd *watchdog, op string, status, version int) (bool, error) {
	wd.touch()
	secrets, err := r.secrets.SigningKeys(ctx, j.RequesterID)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		r.log.Warn("refresh not sent: requester secret unavailable", "job_id", j.ID, "err", err)
		return false, nil
	}
	req := RefreshRequest{
		Type: "credentials.refresh", JobID: j.ID, CredentialVersion: version, Operation: op,
		StorageStatus: status, RefreshAttempt: j.RefreshAttempts, RequestedAt: r.refresh.now().UTC(),
	}
	if err := r.refresh.call(ctx, j.RefreshURL, req, secrets); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		r.log.Warn("refresh call failed", "job_id", j.ID, "err", err)
		return false, nil
	}
	deadline := time.Now().Add(r.set.RefreshWait)
	poll := min(250*time.Millisecond, r.set.RefreshWait/4)
	for {
		wd.touch() // a bounded wait for the requester, not a stall
		v, err := r.jobs.CredentialVersion(ctx, j.ID)
		if err == nil && v > version {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		if !daemon.Sleep(ctx, poll) {
			return false, ctx.Err()
		}
	}
}
