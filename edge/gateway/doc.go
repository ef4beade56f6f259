// Package gateway is the HTTP face of the edge job system: POST /v1/jobs
// validates a request, applies backpressure and idempotency and enqueues the
// job through edge/jobs; GET /v1/jobs/{id} and POST /v1/jobs/{id}/cancel read
// and cancel it; GET /v1/jobs/{id}/events streams the job's events as
// Server-Sent Events.
//
// Event streams share one fan-out reader (Hub): a single goroutine on a
// single dedicated Redis connection XREADs every watched job's event stream
// in one blocking call and hands entries to subscribers, so a thousand
// watching clients cost one connection, not a thousand. A new subscriber
// catches up with XRANGE from its Last-Event-ID up to the reader's cursor and
// then takes live entries, dropping any id it has already sent, which gives
// resumption with neither gap nor duplicate. A job already finished when
// its stream opens is replayed from Redis after the cursor and the stream
// ends, without joining the reader; a job whose hash is terminal before its
// terminal event is stored (a two-step writer) gets a short grace for that
// event, waited for on the shared reader. A job whose events key is not a
// stream gets a stream_error event (events_not_a_stream) and its stream
// ends; the shared reader drops it and goes on for the others. A job key
// that is not a hash is answered 409 job_status_unknown, like a status
// this gateway does not know (a stream open at the time gets a
// stream_error of that code). Every write, of at most 64 KiB (a larger
// frame goes out in pieces), has a deadline (Settings.WriteTimeout), so a
// client that stops reading is dropped and resumes later instead of being
// held with its send queue, while one reading slowly gets even a frame
// that takes it many timeouts.
package gateway
