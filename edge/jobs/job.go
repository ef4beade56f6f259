package jobs

import (
	"encoding/json"
	"strconv"
)

// Job is the deserialized job hash. Payload, Result and Error hold JSON
// (null when the hash field is empty); a field that is not valid JSON is
// returned as {"_raw": "<stored string>"}.
type Job struct {
	ID        string          `json:"job_id"`
	Task      string          `json:"task"`
	Payload   json.RawMessage `json:"payload"`
	Status    Status          `json:"status"`
	CreatedTS int64           `json:"created_ts"`
	UpdatedTS int64           `json:"updated_ts"`
	TTLS      int64           `json:"ttl_s"`
	Result    json.RawMessage `json:"result"`
	Error     json.RawMessage `json:"error"`
}

// Event is one entry of job:{id}:events.
type Event struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	TS   int64           `json:"ts"`
	Step string          `json:"step"`
	Data json.RawMessage `json:"data"`
}

func jobFromHash(h map[string]string) *Job {
	return &Job{
		ID:        h["job_id"],
		Task:      h["task"],
		Payload:   DecodeField(h["payload"]),
		Status:    h["status"],
		CreatedTS: atoi(h["created_ts"]),
		UpdatedTS: atoi(h["updated_ts"]),
		TTLS:      atoi(h["ttl_s"]),
		Result:    DecodeField(h["result"]),
		Error:     DecodeField(h["error"]),
	}
}

// EventFromValues builds an Event from a stream entry's id and fields.
func EventFromValues(id string, v map[string]any) Event {
	str := func(k string) string { s, _ := v[k].(string); return s }
	data := DecodeField(str("data"))
	if data == nil {
		data = json.RawMessage(`{}`)
	}
	return Event{ID: id, Type: str("type"), TS: atoi(str("ts")), Step: str("step"), Data: data}
}

// DecodeField turns a stored JSON string back into JSON: "" is null, and a
// string that does not parse is wrapped as {"_raw": s}.
func DecodeField(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	raw, _ := json.Marshal(map[string]string{"_raw": s})
	return raw
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
