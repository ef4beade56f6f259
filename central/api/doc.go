// Package api is the HTTP face of euterpe-central's transcode inbox:
// POST /transcode enqueues a job (202, idempotent under the
// Idempotency-Key header), GET /transcode/status reports it, and
// /openapi.json documents both. Every call is authenticated with a
// requester's API key (Authorization: Bearer); a requester sees only its
// own jobs. Request bodies are validated field by field before anything is
// written, and the credentials they carry go straight into the sealed
// envelope: the plaintext never reaches a log line, an error, a status
// response or an outbox payload.
package api
