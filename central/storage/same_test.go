package storage_test

import (
	"testing"

	"github.com/vesta-cx/euterpe/central/storage"
)

// TestSameBucket: spellings of one endpoint that reach one server are one
// bucket; another host, port or bucket name is not.
func TestSameBucket(t *testing.T) {
	b := func(ep, name string) storage.Bucket { return storage.Bucket{Endpoint: ep, Name: name} }
	for _, tc := range []struct {
		a, b storage.Bucket
		same bool
	}{
		{b("http://127.0.0.1:7070", "m"), b("http://127.0.0.1:7070", "m"), true},
		{b("http://127.0.0.1:7070", "m"), b("HTTP://127.0.0.1:7070/", "m"), true},
		{b("https://S3.Example.com", "m"), b("https://s3.example.com:443", "m"), true},
		{b("http://s3.example.com", "m"), b("http://s3.example.com:80/", "m"), true},
		{b("", "m"), b("https://s3.eu-west-1.amazonaws.com", "m"), true},
		{b("https://s3.dualstack.us-east-1.amazonaws.com", "m"), b("https://S3.amazonaws.com", "m"), true},
		{b("http://127.0.0.1:7070", "m"), b("http://127.0.0.1:7070", "n"), false},
		{b("http://127.0.0.1:7070", "m"), b("http://127.0.0.1:7071", "m"), false},
		{b("http://s3.example.com", "m"), b("https://s3.example.com", "m"), false},
		{b("", "m"), b("https://s3.cn-north-1.amazonaws.com.cn", "m"), false},
		{b("", "m"), b("https://s3.example.com", "m"), false},
	} {
		if got := storage.SameBucket(tc.a, tc.b); got != tc.same {
			t.Errorf("SameBucket(%+v, %+v) = %v", tc.a, tc.b, got)
		}
		if got := storage.SameBucket(tc.b, tc.a); got != tc.same {
			t.Errorf("SameBucket(%+v, %+v) = %v", tc.b, tc.a, got)
		}
	}
}

// TestURLKey: a signed URL names an object of a bucket path style or
// virtual-hosted style on the bucket's server, whatever its query.
func TestURLKey(t *testing.T) {
	local := storage.Bucket{Endpoint: "http://127.0.0.1:7070", Name: "media"}
	aws := storage.Bucket{Name: "my.media"}
	for _, tc := range []struct {
		url  string
		b    storage.Bucket
		key  string
		want bool
	}{
		{"http://127.0.0.1:7070/media/in/a.ogg?X-Amz-Signature=x", local, "in/a.ogg", true},
		{"HTTP://127.0.0.1:7070/media/in/a%20b.ogg", local, "in/a b.ogg", true},
		{"http://media.127.0.0.1:7070/in/a.ogg", local, "in/a.ogg", true},
		{"http://127.0.0.1:7070/media/in/b.ogg", local, "in/a.ogg", false},
		{"http://127.0.0.1:7070/other/in/a.ogg", local, "in/a.ogg", false},
		{"http://127.0.0.1:7071/media/in/a.ogg", local, "in/a.ogg", false},
		{"https://my.media.s3.eu-west-1.amazonaws.com/in/a.ogg?X-Amz-Signature=x", aws, "in/a.ogg", true},
		{"https://s3.amazonaws.com/my.media/in/a.ogg", aws, "in/a.ogg", true},
		{"https://cdn.example.com/in/a.ogg", aws, "in/a.ogg", false},
		{"::", aws, "in/a.ogg", false},
	} {
		key, ok := storage.URLKey(tc.url, tc.b)
		if got := ok && key == tc.key; got != tc.want {
			t.Errorf("URLKey(%q, %+v) = %q, %v; want %q: %v", tc.url, tc.b, key, ok, tc.key, tc.want)
		}
	}
}
