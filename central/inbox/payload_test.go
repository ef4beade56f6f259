package inbox

import (
	"encoding/json"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPayloadMatchesEncodingJSON holds the event encoder to what
// json.Marshal writes, byte for byte, for the fields' ordinary values and
// for every value that leaves a fast path.
func TestPayloadMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 3, 4, 120500000, time.UTC)
	progress, zero := 42, 0
	meta := json.RawMessage(`{ "track": "t1", "note": "<a & b>", "u": "\u2028" }`)
	outputs := json.RawMessage(`[{"name":"hi","size":12}]`)
	base := Event{EventID: "0190b3a4-6c1e-7d2a-9f00-123456789abc", Type: EventType, JobID: "0190b3a4-6c1e-7d2a-9f00-abcdefabcdef",
		Sequence: 3, Status: "processing", PreviousStatus: "fetching", OccurredAt: at, AttemptCount: 1}
	cases := []struct {
		name string
		edit func(e *Event)
	}{
		{"plain", func(*Event) {}},
		{"whole seconds", func(e *Event) { e.OccurredAt = at.Truncate(time.Second) }},
		{"not UTC", func(e *Event) { e.OccurredAt = at.In(time.FixedZone("x", 5*3600+1800)) }},
		{"metadata to compact and escape", func(e *Event) { e.Metadata = meta }},
		{"metadata encoded once", func(e *Event) { e.Metadata = meta; e.metadataEnc = encodeRaw(meta) }},
		{"metadata of another slice", func(e *Event) {
			e.Metadata = json.RawMessage(`{"other": 1}`)
			e.metadataEnc = encodeRaw(meta)
		}},
		{"empty metadata", func(e *Event) { e.Metadata = json.RawMessage{} }},
		{"outputs", func(e *Event) { e.Status = "succeeded"; e.Outputs = outputs; e.outputsEnc = encodeRaw(outputs) }},
		{"error", func(e *Event) {
			e.Status = "failed"
			e.Error = &ErrorBody{Code: "bad_media", Message: "ffmpeg: \"x\" <stderr>\n\x01 \xff done"}
		}},
		{"progress", func(e *Event) { e.Progress = &progress }},
		{"progress zero", func(e *Event) { e.Progress = &zero }},
		{"strings to escape", func(e *Event) {
			e.EventID, e.JobID, e.Status, e.PreviousStatus = `a"b\c`, "é\u2028", "<x>&", "tab\there\x7f"
		}},
		{"invalid UTF-8", func(e *Event) { e.Type = "a\xffb" }},
		{"negatives", func(e *Event) { e.Sequence, e.AttemptCount = -1, -7 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := base
			c.edit(&e)
			requireSamePayload(t, e)
		})
	}
}

// TestPayloadErrorsLikeEncodingJSON: a value json.Marshal refuses is
// refused here too, never written as a broken payload.
func TestPayloadErrorsLikeEncodingJSON(t *testing.T) {
	cases := map[string]Event{
		"invalid metadata":        {Metadata: json.RawMessage(`{"a":`)},
		"invalid encoded outputs": {Outputs: json.RawMessage(`nope`), outputsEnc: encodeRaw(json.RawMessage(`nope`))},
		"year past 9999":          {OccurredAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for name, e := range cases {
		t.Run(name, func(t *testing.T) {
			_, want := json.Marshal(e)
			require.Error(t, want)
			_, err := e.appendJSON(nil)
			require.Error(t, err)
		})
	}
}

// TestPayloadRandomStrings compares the encoders on random strings drawn
// from the characters that need escaping and the ones that do not.
func TestPayloadRandomStrings(t *testing.T) {
	alphabet := []string{"a", "Z", "0", "-", " ", `"`, `\`, "<", ">", "&", "\n", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "\xff", "😀"}
	r := rand.New(rand.NewSource(1))
	str := func() string {
		s := ""
		for n := r.Intn(12); n > 0; n-- {
			s += alphabet[r.Intn(len(alphabet))]
		}
		return s
	}
	for i := 0; i < 2000; i++ {
		e := Event{EventID: str(), Type: str(), JobID: str(), Status: str(), PreviousStatus: str(),
			OccurredAt: time.Unix(r.Int63n(1<<35), r.Int63n(1e9)).UTC(), Sequence: r.Int63(), AttemptCount: r.Intn(100)}
		requireSamePayload(t, e)
	}
}

// requireSamePayload fails unless appendJSON writes what json.Marshal does.
func requireSamePayload(t *testing.T, e Event) {
	t.Helper()
	want, err := json.Marshal(e)
	require.NoError(t, err)
	got, err := e.appendJSON(nil)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

func BenchmarkEventPayload(b *testing.B) {
	meta := json.RawMessage(`{"track":"t1"}`)
	e := Event{EventID: newID(), Type: EventType, JobID: newID(), Sequence: 3, Status: "processing",
		PreviousStatus: "fetching", OccurredAt: time.Now().UTC(), AttemptCount: 1, Metadata: meta, metadataEnc: encodeRaw(meta)}
	b.Run("appendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := e.appendJSON(make([]byte, 0, 320)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := json.Marshal(e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
