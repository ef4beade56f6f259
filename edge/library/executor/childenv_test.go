package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestThumbnailToolsGetNoSecrets: ffmpeg and ffprobe decode whatever the
// library holds, so they are started without the edge's secrets (the
// Redis URL with its password, the model server's key, the sync secret,
// systemd's credentials); the rest of the environment is kept.
func TestThumbnailToolsGetNoSecrets(t *testing.T) {
	t.Setenv("EUTERPE_REDIS_URL", "redis://:planted-redis-password@127.0.0.1:1/0")
	t.Setenv("EUTERPE_LLM_API_KEY", "planted-llm-key")
	t.Setenv("CREDENTIALS_DIRECTORY", "/run/credentials/planted")
	t.Setenv("EUTERPE_SOME_SETTING", "") // every EUTERPE_ variable is held back
	t.Setenv("LANG_KEPT_FOR_TOOLS", "kept")
	e := newEnv(t, true)
	bin, out := t.TempDir(), t.TempDir()
	for _, name := range []string{"ffmpeg", "ffprobe"} {
		script := "#!/bin/sh\nenv > " + filepath.Join(out, name+".env") + "\nexit 1\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.x.FFmpeg, e.x.FFprobe = filepath.Join(bin, "ffmpeg"), filepath.Join(bin, "ffprobe")
	src := filepath.Join(e.root, "v.mp4")
	e.write("v.mp4", "not really a video")
	e.scanAndHash()
	e.admit(src, store.FormatJPEG, 32)
	if _, err := e.x.RunThumbnailOnce(context.Background()); err != nil {
		t.Fatalf("RunThumbnailOnce: %v", err)
	}
	ran := 0
	for _, name := range []string{"ffmpeg", "ffprobe"} {
		b, err := os.ReadFile(filepath.Join(out, name+".env"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ran++
		env := string(b)
		for _, s := range []string{"planted-redis-password", "planted-llm-key", "/run/credentials/planted", "EUTERPE_"} {
			if strings.Contains(env, s) {
				t.Errorf("%s: %q reached its environment", name, s)
			}
		}
		if !strings.Contains(env, "LANG_KEPT_FOR_TOOLS=kept") || !strings.Contains(env, "PATH=") {
			t.Errorf("%s: the rest of the environment was not kept:\n%s", name, env)
		}
	}
	if ran == 0 {
		t.Fatal("neither ffmpeg nor ffprobe ran")
	}
}
