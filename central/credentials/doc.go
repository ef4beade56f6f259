// Package credentials protects the secrets central must keep: the storage
// credentials (and signed-URL query strings) that come with a transcode
// request, and each requester's webhook signing secret. Every blob is
// sealed by envelope encryption: a fresh 256-bit data key (DEK) encrypts
// the blob with AES-256-GCM, and a key-encryption key (KEK) from the
// keyring wraps the DEK, also with AES-256-GCM. Both layers carry the same
// associated data, which binds the blob to its row (job id, requester id,
// credential version), so a blob copied to another row fails to open.
//
// The keyring maps kek_id to key; one is active and seals new blobs, the
// others still open old ones until `euterpe-central keys rewrap` moves them
// to the active KEK (only the DEK is rewrapped; the payload is untouched).
// Errors from this package never contain key or plaintext material.
package credentials
