// Package serve composes euterpe-central's long-running process from roles.
// A role is one independent loop (the HTTP API, a transcode executor, the
// webhook dispatcher, …) with a name and a Run method; the composition opens
// the database, migrates it, loads the keyring, builds the shared
// dependencies (Deps) once, starts every enabled role under one context and
// stops them all when any fails or the process is asked to stop. Roles are
// registered explicitly by the program's main package and can be turned on
// and off with EUTERPE_CENTRAL_ROLES. Nothing here pretends: without a
// registered executor role, accepted jobs simply stay queued and the log
// says so at start.
package serve
