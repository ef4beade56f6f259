// Package api serves the edge library over HTTP, JSON under /api/v1, on the
// edge daemon's echo instance: enqueue a scan (409 while one is active),
// list and read jobs with the keyset cursor of protocol §6.1, page duplicate
// groups (§6.2) and their files (§6.3), fetch or queue a thumbnail, request
// the deletion of duplicates, and request a WAL checkpoint. Malformed
// cursors, group keys and modes are 400 with a message saying what is wrong;
// unknown ids are 404.
package api
