package jobs

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStreamID(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		want StreamID
		next string
	}{
		{"1-0", true, StreamID{1, 0}, "1-1"},
		{"1700000000000-5", true, StreamID{1700000000000, 5}, "1700000000000-6"},
		{"42", true, StreamID{42, 0}, "42-1"},
		{"5-18446744073709551615", true, StreamID{5, ^uint64(0)}, "6-0"},
		{"", false, StreamID{}, ""},
		{"a-1", false, StreamID{}, ""},
		{"1-b", false, StreamID{}, ""},
		{"-1", false, StreamID{}, ""},
		{"1-2-3", false, StreamID{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseStreamID(tt.in)
			if !tt.ok {
				assert.ErrorIs(t, err, ErrBadStreamID)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.next, got.Next().String())
			assert.True(t, got.Less(got.Next()))
		})
	}
	// The largest id has no successor: Next must not wrap to 0-0.
	last := StreamID{^uint64(0), ^uint64(0)}
	assert.Equal(t, last, last.Next())
	assert.Equal(t, StreamID{^uint64(0), 0}, StreamID{^uint64(0) - 1, ^uint64(0)}.Next())
}

func TestDecodeField(t *testing.T) {
	assert.Nil(t, DecodeField(""))
	assert.JSONEq(t, `{"a":1}`, string(DecodeField(`{"a":1}`)))
	assert.JSONEq(t, `{"_raw":"{broken"}`, string(DecodeField(`{broken`)))
}
