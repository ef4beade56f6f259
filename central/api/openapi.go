package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 description of the transcode API, served at
// /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte
