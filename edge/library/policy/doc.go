// Package policy is the control plane of the edge library. It decides what
// work exists and when: it admits scan and hash jobs under the single-active
// rule (a second request is refused, never a second active row), admits
// thumbnails atomically under the queue capacity, authorises deletions
// (the group must exist, every id must be a current member, at least one
// copy must be kept), schedules thumbnail cleanup and WAL checkpoints,
// recovers stale leases (closing the scan sessions a killed scan left
// running), and requeues failed or retryable rows only once their retry
// time has come. The executor package carries the work out.
package policy
