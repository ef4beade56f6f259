package browsertest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A capture Chromium refuses for a moment is tried again; one it keeps
// refusing fails with the browser's own error, and any other error at once.
func TestCaptureTriesAgain(t *testing.T) {
	zero := errors.New("Cannot take screenshot with 0 width. (-32000)")
	cases := []struct {
		name     string
		failures int
		wantErr  bool
	}{
		{"first try", 0, false},
		{"refused twice", 2, false},
		{"refused throughout", 5, true},
	}
	// Another error is no passing state: returned at once.
	hung := errors.New("context deadline exceeded")
	calls := 0
	_, err := capture(func() ([]byte, error) { calls++; return nil, hung }, 5, 0)
	require.ErrorIs(t, err, hung)
	assert.Equal(t, 1, calls)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			png, err := capture(func() ([]byte, error) {
				calls++
				if calls <= tc.failures {
					return nil, zero
				}
				return []byte("png"), nil
			}, 5, 0)
			if tc.wantErr {
				require.ErrorIs(t, err, zero)
				assert.Equal(t, 5, calls)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []byte("png"), png)
			assert.Equal(t, tc.failures+1, calls)
		})
	}
}
