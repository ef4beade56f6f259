package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A body is one JSON value and nothing but whitespace after it. A closing
// bracket or brace after a valid value is trailing data too: central
// stores a heartbeat as sent, and a stored "{…}]]}" is no status at all.
func TestTrailingDataIsRefused(t *testing.T) {
	batch, err := Encode(sample())
	require.NoError(t, err)
	status, err := EncodeStatus(Status{EdgeID: "jetson-1", SentAt: time.UnixMilli(1700000000000).UTC(), Version: "v1",
		StartedAt: time.UnixMilli(1690000000000).UTC()})
	require.NoError(t, err)
	decoders := map[string]struct {
		body   []byte
		decode func([]byte) error
	}{
		"batch":  {batch, func(b []byte) error { _, err := Decode(b); return err }},
		"status": {status, func(b []byte) error { _, err := DecodeStatus(b); return err }},
	}
	for _, tc := range []struct {
		name   string
		suffix string
		ok     bool
	}{
		{"nothing", "", true},
		{"whitespace", " \t\r\n", true},
		{"closing bracket", "]", false},
		{"closing brace", "}", false},
		{"closers", "]]}", false},
		{"closer after whitespace", "\n]", false},
		{"second value", "{}", false},
		{"comma", ",", false},
		{"garbage", " x", false},
	} {
		for name, d := range decoders {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				body := append(append([]byte(nil), d.body...), tc.suffix...)
				err := d.decode(body)
				if tc.ok {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, ErrInvalid)
			})
		}
	}
}
