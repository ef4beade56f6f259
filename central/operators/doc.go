// Package operators keeps the people who run euterpe-central: each has a
// name and a bearer token, issued once by `euterpe-central operator create`
// and stored only as its SHA-256. The operator API (the fleet of synced
// edges, the pipeline queue) sits behind Auth, which accepts operator tokens
// and nothing else: a requester's API key, which opens the transcode API, is
// refused here, and an operator token is refused there, so neither kind of
// credential can stand in for the other. The web console exchanges an
// operator token for a session (Sessions, stored by the SHA-256 of its id,
// honoured only while the operator is enabled) with a CSRF token derived
// from it.
package operators
