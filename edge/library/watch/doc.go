// Package watch keeps the library index fresh without polling: it watches
// every library root recursively with fsnotify (adding folders as they
// appear), collapses bursts of events into one request after a quiet
// period, and asks the policy side for a scan under the single-active rule.
// When a scan is already active the request is kept and retried, so changes
// made during a scan are picked up by the next one. When the kernel's event
// queue overflows, events were lost, and a full scan is requested. Events
// that never stop (a file written for hours) delay a request by at most
// MaxDelay; a scan may be requested at start, for what changed while
// nothing watched; and a disk mounted or unmounted below a root, which
// raises no event, is found in the mount table.
package watch
