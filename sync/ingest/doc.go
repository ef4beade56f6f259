// Package ingest is central's end of edge → central sync: the registry of
// edges and their sealed sync secrets, the signed batch and heartbeat
// endpoints that store every edge event exactly once per event id, the
// per-job summary rows that fleet queries read, and the operator API and
// live fleet tail over them.
package ingest
