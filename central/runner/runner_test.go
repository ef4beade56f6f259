package runner_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strings"
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

// TestEndToEndEveryCodec: POST /transcode → the runner's loop → succeeded
// with every codec; outputs are downloaded back from S3 and checked with
// ffprobe and their checksum.
func TestEndToEndEveryCodec(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 2)
		creds := map[string]string{"access_key_id": e.s3.AccessKey, "secret_access_key": e.s3.SecretKey}
		id := e.post(map[string]any{
			"source":     map[string]any{"bucket": e.s3.Name, "key": "in/src.wav", "endpoint": e.s3.Endpoint, "region": e.s3.Region, "credentials": creds},
			"output":     map[string]any{"bucket": e.s3.Name, "prefix": "out/e2e", "endpoint": e.s3.Endpoint, "region": e.s3.Region, "credentials": creds},
			"renditions": allCodecs,
		})
		v := e.runUntilDone(id, 60*time.Second)
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

// TestSignedURLSource: a source given as a presigned URL is fetched with a
// plain GET; the URL's signature lives only in the sealed credentials.
func TestSignedURLSource(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		u, err := e.s3.Client.PresignedGetObject(context.Background(), e.s3.Name, "in/src.wav", time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		creds := map[string]string{"access_key_id": e.s3.AccessKey, "secret_access_key": e.s3.SecretKey}
		id := e.post(map[string]any{
			"source":     map[string]any{"url": u.String()},
			"output":     map[string]any{"bucket": e.s3.Name, "prefix": "out/url", "endpoint": e.s3.Endpoint, "region": e.s3.Region, "credentials": creds},
			"renditions": []inbox.Rendition{{Name: "m", Codec: "mp3", BitrateKbps: 96}},
		})
		v := e.runUntilDone(id, 30*time.Second)
		if v.Status != schema.StatusSucceeded || len(e.outputs(v)) != 1 {
			t.Fatalf("status %s err %+v", v.Status, v.LastError)
		}
		var stored string
		if err := e.db.QueryRowContext(context.Background(), e.db.Rebind(`SELECT source_url FROM inbox_jobs WHERE id = ?`), id).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stored, "Signature") {
			t.Fatalf("signed query stored in plaintext: %s", stored)
		}
	})
}

func fileSHA256(t testing.TB, path string) string {
	t.Helper()
	b, err := readAll(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
