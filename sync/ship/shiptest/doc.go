// Package shiptest is a stand-in for central's sync ingest that the edge's
// tests ship to: an httptest server verifying each upload as central does
// (central/webhook over the gzip bytes, sync/wire decompression cap and
// decoding) and recording what it accepted, by event id.
package shiptest
