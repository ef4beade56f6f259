package credentials

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"time"
)

// S3 is a set of object-storage credentials as a requester sends them.
type S3 struct {
	AccessKeyID     string     `json:"access_key_id"`
	SecretAccessKey string     `json:"secret_access_key"`
	SessionToken    string     `json:"session_token,omitempty"`
	ExpiresAt       *time.Time `json:"expires_at,omitempty"`
}

// Storage is the secret part of one job's storage access, sealed as one
// blob: the source credentials or the complete signed source URL (its query
// string is the secret), and the output credentials.
type Storage struct {
	Source    *S3    `json:"source,omitempty"`
	SourceURL string `json:"source_url,omitempty"`
	Output    S3     `json:"output"`
}

// String never prints secrets, so a Storage passed to a logger by mistake
// leaks nothing.
func (Storage) String() string { return "credentials.Storage{[REDACTED]}" }

// GoString is the %#v form, redacted too.
func (s Storage) GoString() string { return s.String() }

// LogValue redacts a Storage handed to slog, whose JSON handler would
// otherwise marshal its fields (String is not consulted there).
func (s Storage) LogValue() slog.Value { return slog.StringValue(s.String()) }

// String never prints the secret key or token of c; the access key id
// names the key without opening anything.
func (c S3) String() string { return "credentials.S3{" + c.AccessKeyID + " [REDACTED]}" }

// GoString is the %#v form, redacted too.
func (c S3) GoString() string { return c.String() }

// LogValue redacts an S3 handed to slog.
func (c S3) LogValue() slog.Value { return slog.StringValue(c.String()) }

// SealStorage seals s for one job row.
func (k *Keyring) SealStorage(s Storage, jobID, requesterID string, credentialVersion int) (Sealed, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return Sealed{}, fmt.Errorf("credentials: encode: %w", err)
	}
	defer clear(b)
	return k.Seal(b, JobAAD(jobID, requesterID, credentialVersion))
}

// OpenStorage opens a job row's storage-credential blob.
func (k *Keyring) OpenStorage(sealed Sealed, jobID, requesterID string, credentialVersion int) (Storage, error) {
	b, err := k.Open(sealed, JobAAD(jobID, requesterID, credentialVersion))
	if err != nil {
		return Storage{}, err
	}
	defer clear(b)
	var s Storage
	if err := json.Unmarshal(b, &s); err != nil {
		return Storage{}, ErrDecrypt
	}
	return s, nil
}

// PlainURL is a source URL without what may be secret: its user info, query
// and fragment (a signed URL's signature is in its query). It is what a job
// records of its source in plaintext; the query's object-naming parameters
// are only in the sealed URL (ObjectURL compares them). A URL that does not
// parse gives "".
func PlainURL(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}
