// Package daemon holds what euterpe-edge and euterpe-central share as
// long-running processes: settings read from flags and EUTERPE_* environment
// variables and validated before anything starts, JSON logs that redact
// secrets, the worker identity every lease is taken under (POD_NAME, then
// HOSTNAME, then a UUID minted at process start), systemd readiness and
// watchdog notification, the HTTP server scaffolding with /healthz and
// /ready, graceful shutdown on SIGTERM/SIGINT, and a process made non-dumpable
// so the programs it runs cannot read its secrets through /proc.
//
// Sub-packages hold the pieces several queues reuse: lease (fencing errors,
// transition tables, retry backoff, heartbeats) and the SQL engine layer.
package daemon
