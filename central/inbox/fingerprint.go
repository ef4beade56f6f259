package inbox

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/vesta-cx/euterpe/central/credentials"
)

// sourceFingerprint is what a job's sealed credentials say about the
// object it transcodes, in a form that can be stored and compared in
// plaintext: SHA-256 over the job id, the source kind and, for a URL
// source, credentials.ObjectURL of the signed URL. A refresh must keep
// it, so the API judges a refresh by the row alone and never opens the
// credentials (contract §10: decrypt only in the worker).
//
// What goes in is what the idempotency hash of the enqueue already covers:
// ObjectURL drops user info, the fragment and every signature parameter,
// so no key, token or signature reaches the hash, and a renewed signature
// gives the same fingerprint. The job id makes equal URLs of two jobs hash
// apart, so rows cannot be matched to each other or to a table of guessed
// URLs computed once. A bucket source has no object identity in its
// credentials (bucket and key are plain columns a refresh cannot change):
// its fingerprint only names the kind.
//
// A URL that does not parse has the empty identity; sameFingerprint
// refuses a refreshed URL without one, so such a job, like before, takes
// no refresh of its URL.
func sourceFingerprint(jobID string, creds credentials.Storage) string {
	kind, object := "bucket", ""
	if creds.SourceURL != "" {
		kind, object = "url", credentials.ObjectURL(creds.SourceURL)
	}
	// NUL-separated with the only free-form field last: no two inputs
	// share an encoding (job ids and kinds hold no NUL).
	sum := sha256.Sum256([]byte("euterpe/source_fingerprint/v1\x00" + jobID + "\x00" + kind + "\x00" + object))
	return hex.EncodeToString(sum[:])
}

// sameFingerprint checks refreshed credentials against the fingerprint the
// job row holds: the rule sameObject applies to the sealed URL, without
// opening it.
func sameFingerprint(stored, jobID string, refreshed credentials.Storage) error {
	if refreshed.SourceURL != "" && credentials.ObjectURL(refreshed.SourceURL) == "" {
		return errOtherObject
	}
	if sourceFingerprint(jobID, refreshed) != stored {
		return errOtherObject
	}
	return nil
}
