package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/central/webhook"
)

func sample() Batch {
	return Batch{EdgeID: "jetson-1", SentAt: time.Unix(1700000000, 0).UTC(), Events: []Event{
		NewEvent("jetson-1", "job-1", "1700000000000-0", "queued", "gateway.enqueue", 1700000000000, json.RawMessage(`{}`)),
		NewEvent("jetson-1", "job-1", "1700000000001-0", "done", "worker.finish", 1700000000001, json.RawMessage(`{"text":"hi"}`)),
	}}
}

func TestRoundTrip(t *testing.T) {
	body, err := Encode(sample())
	require.NoError(t, err)
	got, err := Decode(body)
	require.NoError(t, err)
	require.Equal(t, sample(), got)
	require.Equal(t, "jetson-1:job-1:1700000000001-0", got.Events[1].EventID)
}

func TestDecodeRejects(t *testing.T) {
	mutate := func(f func(*Batch)) string {
		b := sample()
		f(&b)
		raw, _ := json.Marshal(b)
		return string(raw)
	}
	cases := map[string]string{
		"not json":                     `{`,
		"unknown field":                strings.Replace(mutate(func(*Batch) {}), `"edge_id":"jetson-1",`, `"edge_id":"jetson-1","extra":1,`, 1),
		"unknown event field":          strings.Replace(mutate(func(*Batch) {}), `"type":`, `"priority":3,"type":`, 1),
		"unknown field, trailing data": strings.Replace(mutate(func(*Batch) {}), `"edge_id":"jetson-1",`, `"edge_id":"jetson-1","extra":1,`, 1) + `{}`,
		"trailing data":                mutate(func(*Batch) {}) + `{}`,
		"no events":                    mutate(func(b *Batch) { b.Events = nil }),
		"gap-free empty":               mutate(func(b *Batch) { b.Events = []Event{}; b.Dropped = nil }),
		"bad edge id":                  mutate(func(b *Batch) { b.EdgeID = "a b" }),
		"foreign edge":                 mutate(func(b *Batch) { b.Events[0].EdgeID = "other" }),
		"bad entry id":                 mutate(func(b *Batch) { b.Events[0].EntryID = "x"; b.Events[0].EventID = EventID("jetson-1", "job-1", "x") }),
		"leading zero":                 mutate(func(b *Batch) { setEntry(&b.Events[0], "01700000000000-0") }),
		"leading zero seq":             mutate(func(b *Batch) { setEntry(&b.Events[0], "1700000000000-00") }),
		"entry past int64":             mutate(func(b *Batch) { setEntry(&b.Events[0], "9223372036854775808-0") }),
		"seq past int64":               mutate(func(b *Batch) { setEntry(&b.Events[0], "1-18446744073709551615") }),
		"gap entry past int64": mutate(func(b *Batch) {
			b.Dropped = []Gap{{GapID: GapID("jetson-1", "job-1", "1-0"), JobID: "job-1", FirstEntryID: "1-0",
				LastEntryID: "99999999999999999999-0", Type: "delta", Count: 1, FirstTS: 1, LastTS: 1}}
		}),
		"forged event id": mutate(func(b *Batch) { b.Events[0].EventID = "jetson-1:job-2:1-0" }),
		"missing type":    mutate(func(b *Batch) { b.Events[0].Type = "" }),
		"zero ts":         mutate(func(b *Batch) { b.Events[0].TS = 0 }),
		"too many events": mutate(func(b *Batch) { b.Events = make([]Event, MaxEvents+1) }),
		"oversized data":  mutate(func(b *Batch) { b.Events[0].Data = json.RawMessage(`"` + strings.Repeat("x", MaxDataBytes) + `"`) }),
		"oversized body":  `{"edge_id":"` + strings.Repeat("x", MaxBodyBytes) + `"}`,
		// JSON carries these; Postgres text cannot store them.
		"latin-1 data": mutate(func(b *Batch) { b.Events[1].Data = json.RawMessage("{\"text\":\"caf\xe9\"}") }),
		"NUL in step":  mutate(func(b *Batch) { b.Events[1].Step = "worker\x00finish" }),
		"path-like job id": mutate(func(b *Batch) {
			b.Events[0].JobID = "../etc"
			b.Events[0].EventID = EventID("jetson-1", "../etc", b.Events[0].EntryID)
		}),
		"empty body":        ``,
		"null events entry": strings.Replace(mutate(func(*Batch) {}), `"events":[`, `"events":[null,`, 1),
	}
	// A body that is a batch but for fields this version does not know
	// comes from a newer sender, which central tells apart (and the edge
	// keeps its events for); anything else wrong with it does not.
	unsupported := map[string]bool{"unknown field": true, "unknown event field": true}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(body))
			require.ErrorIs(t, err, ErrInvalid)
			require.Equal(t, unsupported[name], errors.Is(err, ErrUnsupported), "%v", err)
		})
	}
}

func TestSignedLikeWebhooks(t *testing.T) {
	b := sample()
	body, err := Encode(b)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, "https://central.example/v1/sync/events", bytes.NewReader(body))
	require.NoError(t, err)
	secret := []byte("whsec_test")
	now := time.Now()
	require.NoError(t, Sign(req, now, b, body, secret))
	d, err := webhook.Verify([][]byte{secret}, req.Header, body, now)
	require.NoError(t, err)
	require.Equal(t, b.Events[0].EventID, d.EventID)
	_, err = webhook.Verify([][]byte{[]byte("wrong")}, req.Header, body, now)
	require.ErrorIs(t, err, webhook.ErrBadSignature)
}

func FuzzDecode(f *testing.F) {
	body, _ := Encode(sample())
	f.Add(body)
	f.Add([]byte(`{"edge_id":"e","events":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := Decode(body)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same batch.
		again, err := Encode(b)
		require.NoError(t, err)
		b2, err := Decode(again)
		require.NoError(t, err)
		require.Equal(t, b.Events, b2.Events)
	})
}

// TestEncodeOutputDecodes: whatever Encode accepts, Decode (central) must
// accept too; otherwise a good batch is answered 400 and set aside for good.
func TestEncodeOutputDecodes(t *testing.T) {
	near := MaxDataBytes - 64
	cases := map[string]json.RawMessage{
		"html characters": json.RawMessage(`{"text":"` + strings.Repeat("<a>&", near/4-4) + `"}`),
		"line separators": json.RawMessage(`{"text":"` + strings.Repeat("\u2028", near/3-4) + `"}`),
		"spaced json":     json.RawMessage(`{"text": [` + strings.Repeat(`1, `, near/3-10) + `1]}`),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			require.LessOrEqual(t, len(data), MaxDataBytes)
			b := sample()
			b.Events[1].Data = data
			body, err := Encode(b)
			require.NoError(t, err)
			got, err := Decode(body)
			require.NoError(t, err)
			var want, have any
			require.NoError(t, json.Unmarshal(data, &want))
			require.NoError(t, json.Unmarshal(got.Events[1].Data, &have))
			require.Equal(t, want, have, "the data arrives as sent")
		})
	}
}

func setEntry(e *Event, id string) {
	e.EntryID = id
	e.EventID = EventID(e.EdgeID, e.JobID, id)
}

func TestValidEntryID(t *testing.T) {
	for id, want := range map[string]bool{
		"0-0": true, "1-0": true, "1700000000001-12": true, "9223372036854775807-9223372036854775807": true,
		"": false, "1": false, "-1": false, "1-": false, "01-0": false, "1-01": false, "00-0": false,
		"9223372036854775808-0": false, "1-9223372036854775808": false, "+1-0": false, "1-0-0": false, " 1-0": false,
	} {
		require.Equal(t, want, ValidEntryID(id), id)
	}
}
