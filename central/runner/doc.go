// Package runner is the transcode runner role of euterpe-central. It claims
// inbox jobs through the shared lease protocol and walks each one through
// claimed → fetching → processing → uploading → succeeded: it fetches the
// source from the requester's storage (central/storage), encodes every
// requested rendition with the system ffmpeg (central/transcode) in a
// scratch directory of its own, uploads the outputs and records them. A
// heartbeat renews the lease while the attempt makes progress (ffmpeg's
// progress reports, bytes fetched or uploaded); when nothing advances for
// the stall timeout the runner stops renewing and gives the attempt up as
// transcode_stalled. When a fenced write comes back stale the work context
// is cancelled, ffmpeg dies with it and the runner never touches that job
// again.
//
// Failures are classified by a table into the inbox's retry classes.
// Storage answering 401 or 403 starts the credential refresh flow: a signed
// call to the job's refresh_url, then a wait for credential_version to
// advance, under the job's own refresh budget. A missing ffmpeg is the
// machine's fault, not the job's: the runner reports not ready, stops
// claiming, and gives any job it holds back without spending an attempt.
package runner
