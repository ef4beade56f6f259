package jobs

// Captured is one entry of CaptureStream: an event the scripts wrote to
// job:{JobID}:events under the entry id Entry, with the job's task.
type Captured struct {
	ID    string // the entry's id on CaptureStream
	JobID string
	Entry string // the event's entry id on job:{JobID}:events
	Type  string
	Step  string
	Task  string
	TS    int64
	Data  string // as written (JSON)
}

// CapturedFromValues builds a Captured from a CaptureStream entry.
func CapturedFromValues(id string, v map[string]any) Captured {
	str := func(k string) string { s, _ := v[k].(string); return s }
	return Captured{ID: id, JobID: str("job_id"), Entry: str("entry"), Type: str("type"), Step: str("step"),
		Task: str("task"), TS: atoi(str("ts")), Data: str("data")}
}
