// Package lease holds the ownership protocol every queue in Euterpe follows,
// whichever table or engine it lives in: a worker claims a row under a lease
// that expires, heartbeats to extend it at a third of its length, and carries
// a fencing token (claim_version, or its worker id where a table has none)
// on every write; a write that matches zero rows means another worker has
// reclaimed the row and this one must stop at once (StaleError). State
// machines are Transitions tables checked before every status write, and
// retries wait by exponential backoff with full jitter (Backoff).
//
// The SQL that claims, heartbeats and fences rows for a given engine lives
// beside the engine layer; this package is what those share.
package lease
