package runner_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
)

var allCodecs = []inbox.Rendition{
	{Name: "opus-96", Codec: "opus", BitrateKbps: 96, SampleRateHz: 48000, Channels: 2},
	{Name: "aac-128", Codec: "aac", BitrateKbps: 128, SampleRateHz: 44100, Channels: 2},
	{Name: "mp3-mono", Codec: "mp3", BitrateKbps: 64, SampleRateHz: 22050, Channels: 1},
	{Name: "flac", Codec: "flac", SampleRateHz: 48000},
}

// TestEndToEndEveryCodec: enqueue → succeeded with every codec; outputs are
// downloaded back from S3 and checked with ffprobe and their checksum.
func TestEndToEndEveryCodec(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 2)
		id := e.enqueue("in/src.wav", allCodecs, nil)
		r := e.runner(nil)
		v := e.drive(r, id, 60*time.Second)
		if v.Status != schema.StatusSucceeded || v.AttemptCount != 1 {
			t.Fatalf("status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		outs := e.outputs(v)
		if len(outs) != len(allCodecs) {
			t.Fatalf("%d outputs", len(outs))
		}
		want := map[string]string{"opus-96": "opus,48000,2", "aac-128": "aac,44100,2", "mp3-mono": "mp3,22050,1", "flac": "flac,48000,2"}
		dir := t.TempDir()
		for _, o := range outs {
			local := filepath.Join(dir, filepath.Base(o.Key))
			if err := e.s3.Client.FGetObject(context.Background(), o.Bucket, o.Key, local, minio.GetObjectOptions{}); err != nil {
				t.Fatalf("download %s: %v", o.Key, err)
			}
			if got := ffprobe(t, local); got != want[o.Rendition] {
				t.Errorf("%s: ffprobe %s, want %s", o.Rendition, got, want[o.Rendition])
			}
			if o.DurationMS < 1900 || o.DurationMS > 2100 || o.SizeBytes <= 0 || o.Codec == "" {
				t.Errorf("%s: recorded %+v", o.Rendition, o)
			}
			if got := fileSHA256(t, local); got != o.Checksum {
				t.Errorf("%s: checksum %s, recorded %s", o.Rendition, got, o.Checksum)
			}
		}
		ev := e.events(id)
		for _, s := range []string{"claimed", "fetching", "processing", "uploading", "succeeded"} {
			if !slices.Contains(ev, s) {
				t.Errorf("events %v lack %s", ev, s)
			}
		}
		e.scratchEmpty()
	})
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := readAll(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
