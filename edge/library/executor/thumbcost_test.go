package executor_test

import (
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestThumbIOCost: an image, decoded whole, books its size in the I/O
// bucket; a video, of which ffmpeg reads one frame, books its size only up
// to VideoThumbIOCost, so a large video does not hold every thumbnail
// behind it for its whole size.
func TestThumbIOCost(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name   string
		media  string
		format string
		size   int64
		want   int64
	}{
		{"jpeg image", store.MediaImage, store.FormatJPEG, 10 * mib, 10 * mib},
		{"large image rendered by ffmpeg", store.MediaImage, store.FormatWebP, 200 * mib, 200 * mib},
		{"small video", store.MediaVideo, store.FormatJPEG, 3 * mib, 3 * mib},
		{"video at the bound", store.MediaVideo, store.FormatJPEG, executor.VideoThumbIOCost, executor.VideoThumbIOCost},
		{"4 GiB video", store.MediaVideo, store.FormatJPEG, 4 << 30, executor.VideoThumbIOCost},
		{"4 GiB video to webp", store.MediaVideo, store.FormatWebP, 4 << 30, executor.VideoThumbIOCost},
		{"empty video", store.MediaVideo, store.FormatJPEG, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task := &executor.ThumbTask{MediaType: c.media, Format: c.format}
			if got := executor.ThumbIOCost(task, c.size); got != c.want {
				t.Fatalf("cost of %d bytes = %d, want %d", c.size, got, c.want)
			}
		})
	}
}
