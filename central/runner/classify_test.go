package runner

import (
	"fmt"
	"testing"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/transcode"
)

// Errors the transcode package codes itself are recorded under that code
// with the class the contract's table gives, whatever wraps them. Before,
// an output held open after ffmpeg exited (a site wrapper's daemonised
// child) was recorded as "internal".
func TestClassifyTranscodeErrors(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		class inbox.Class
		code  string
	}{
		{"output held, not complete", &transcode.HeldError{Program: "ffmpeg", Stderr: "tail"}, inbox.Retryable, "output_held"},
		{"output held, wrapped", fmt.Errorf("transcode hi: %w", &transcode.HeldError{Program: "ffprobe"}), inbox.Retryable, "output_held"},
		{"local disk", fmt.Errorf("x: %w", transcode.ErrLocalIO), inbox.Retryable, "local_io"},
		{"invalid media", fmt.Errorf("x: %w", transcode.ErrInvalidMedia), inbox.Permanent, "invalid_media"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			je := classify(tc.err)
			if je.Class != tc.class || je.Code != tc.code {
				t.Fatalf("classify(%v) = %s/%s; want %s/%s", tc.err, je.Class, je.Code, tc.class, tc.code)
			}
			if je.Code != transcode.Code(tc.err) {
				t.Fatalf("runner code %q, transcode.Code %q: the two tables disagree", je.Code, transcode.Code(tc.err))
			}
		})
	}
}
