// Package storage moves a transcode job's bytes between the requester's
// storage and the runner's disk: it fetches the source from a signed URL
// (plain HTTP GET) or an S3-compatible object, and uploads each output to
// the output bucket under the job's prefix. Both directions stream between
// the network and a local file, so memory does not grow with file size, and
// the source size limit is checked before the body is read and enforced
// again while it streams.
//
// Every failure is an *Error carrying the HTTP status (0 for a network
// failure) and a Class from a table: retryable, throttled (429), auth (401
// and 403, which start a credential refresh) or final (an address the
// outbound policy of central/ssrf refuses is final: destination_refused). Credentials are
// taken per call and never kept, logged or put into an error.
//
// S3 access uses minio-go/v7: it is a single, dependency-light module with
// SigV4, multipart upload from an io.ReaderAt without buffering whole parts,
// and path-style addressing for S3-compatible servers.
package storage
