package inbox

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendJSON appends the webhook body of e to b: byte for byte what
// json.Marshal(e) writes (TestPayloadMatchesEncodingJSON), without its
// reflection. Every transition writes one of these, so on a burn-down the
// reflective encoder was a quarter of the process's CPU.
//
// Metadata and Outputs are raw JSON that encoding/json compacts,
// HTML-escapes and validates on every call; a job carries its metadata in
// that form already (Job.metadataEnc), and SucceedMany encodes its outputs
// once, so here those are appended as they are. Anything the fast paths do
// not cover (a string that needs escaping, a time outside UTC, raw JSON not
// known to be in encoded form) goes through encoding/json for that value.
func (e *Event) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"event_id":`...)
	b = appendJSONString(b, e.EventID)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.Type)
	b = append(b, `,"job_id":`...)
	b = appendJSONString(b, e.JobID)
	b = append(b, `,"sequence":`...)
	b = strconv.AppendInt(b, e.Sequence, 10)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, e.Status)
	b = append(b, `,"previous_status":`...)
	b = appendJSONString(b, e.PreviousStatus)
	b = append(b, `,"occurred_at":`...)
	b, err := appendJSONTime(b, e.OccurredAt)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"attempt_count":`...)
	b = strconv.AppendInt(b, int64(e.AttemptCount), 10)
	if len(e.Metadata) > 0 {
		b = append(b, `,"metadata":`...)
		if b, err = appendRaw(b, e.Metadata, e.metadataEnc); err != nil {
			return nil, err
		}
	}
	if len(e.Outputs) > 0 {
		b = append(b, `,"outputs":`...)
		if b, err = appendRaw(b, e.Outputs, e.outputsEnc); err != nil {
			return nil, err
		}
	}
	if e.Error != nil {
		b = append(b, `,"error":`...)
		if b, err = appendMarshal(b, e.Error); err != nil {
			return nil, err
		}
	}
	if e.Progress != nil {
		b = append(b, `,"progress":`...)
		b = strconv.AppendInt(b, int64(*e.Progress), 10)
	}
	return append(b, '}'), nil
}

// appendJSONString appends s as a JSON string. Identifiers and statuses
// are plain ASCII and are copied as they are; anything else is left to
// encoding/json, whose escaping (HTML characters, U+2028, invalid UTF-8)
// the payload must keep.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			out, _ := json.Marshal(s) // a string always marshals
			return append(b, out...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONTime appends t as time.Time.MarshalJSON does; a time that is
// not in UTC or whose year needs more than four digits takes that path.
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); t.Location() != time.UTC || y < 0 || y > 9999 {
		return appendMarshal(b, t)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// appendRaw appends raw JSON: in the form enc holds when enc was made from
// this very slice, otherwise compacted and checked by encoding/json.
func appendRaw(b []byte, raw json.RawMessage, enc encodedRaw) ([]byte, error) {
	if out := enc.of(raw); out != nil {
		return append(b, out...), nil
	}
	return appendMarshal(b, raw)
}

func appendMarshal(b []byte, v any) ([]byte, error) {
	out, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, out...), nil
}

// encodedRaw is a json.RawMessage and the form encoding/json writes it in
// (compacted, HTML-escaped), made once: a job's metadata goes into every
// event of the job, five of them on the happy path.
type encodedRaw struct{ src, enc []byte }

// encodeRaw encodes raw; an empty or invalid raw gives an encodedRaw that
// never matches, so the event's encoder reports the error as
// json.Marshal would.
func encodeRaw(raw json.RawMessage) encodedRaw {
	if len(raw) == 0 {
		return encodedRaw{}
	}
	enc, err := json.Marshal(raw)
	if err != nil {
		return encodedRaw{}
	}
	return encodedRaw{src: raw, enc: enc}
}

// of returns the encoded form when raw is the slice it was made from (the
// same array, not just equal bytes: no comparison on the hot path), else nil.
func (c encodedRaw) of(raw json.RawMessage) []byte {
	if c.enc == nil || len(raw) != len(c.src) || &raw[0] != &c.src[0] {
		return nil
	}
	return c.enc
}
