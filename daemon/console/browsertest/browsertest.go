package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// ChromiumEnv names a browser binary to use instead of the one on PATH.
const ChromiumEnv = "EUTERPE_CHROMIUM"

// Timeout bounds each Run: generous, the machine may be loaded.
var Timeout = 60 * time.Second

// Browser is one headless Chromium with a fresh profile, closed when the
// test ends.
type Browser struct {
	t   testing.TB
	ctx context.Context

	mu     sync.Mutex
	errors []string
}

// Chromium finds the browser: EUTERPE_CHROMIUM, else Debian's
// /usr/bin/chromium, else chromium or chromium-browser on PATH.
func Chromium() (string, error) {
	if p := os.Getenv(ChromiumEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", ChromiumEnv, p, err)
		}
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium", nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("chromium not found")
}

// New starts the browser, or skips t (fails it under CI=true) when there
// is none.
func New(t testing.TB) *Browser {
	t.Helper()
	bin, err := Chromium()
	if err != nil {
		msg := fmt.Sprintf("browser tests need Chromium: %v (install it with: scripts/services.sh up, or apt-get install chromium; or set %s)", err, ChromiumEnv)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// A fresh profile per browser; not t.TempDir, whose removal races with
	// Chromium's helper processes still writing into it as they exit.
	profile, err := os.MkdirTemp("", "euterpe-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(profile),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("mute-audio", true),
		chromedp.WindowSize(1280, 900),
	}
	if tmp, ok := profileTmp(profile); ok {
		if err := os.Mkdir(tmp, 0o700); err != nil {
			_ = os.RemoveAll(profile)
			t.Fatal(err)
		}
		opts = append(opts, chromedp.Env("TMPDIR="+tmp))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	b := &Browser{t: t, ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			b.record("exception: " + ev.ExceptionDetails.Error())
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.LevelError {
				b.record("console: " + ev.Entry.Text)
			}
		}
	})
	// The first Run starts the browser and binds its lifetime to the
	// context it is given: that must be ctx itself, not one with a timeout.
	if err := chromedp.Run(ctx, log.Enable()); err != nil {
		cancelCtx()
		cancelAlloc()
		_ = os.RemoveAll(profile)
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		for i := 0; i < 20 && os.RemoveAll(profile) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	return b
}

// singletonSocket is the longest path Chromium puts in its TMPDIR
// directory: a Unix socket, whose path must fit in sun_path (104 bytes
// with the NUL on macOS, 108 on Linux).
const (
	singletonSocket = "/org.chromium.Chromium.XXXXXX/SingletonSocket"
	socketPathMax   = 103
)

// profileTmp is the TMPDIR to give the browser inside its profile.
// Chromium makes an org.chromium.Chromium.* directory there that it
// removes only on a clean exit, and the browser is killed at the end: in
// the profile, it goes with the profile. Under a TMPDIR so long that the
// browser's socket would not fit there, ok is false and the browser keeps
// the TMPDIR it inherits: a directory left behind, rather than no browser.
func profileTmp(profile string) (dir string, ok bool) {
	dir = filepath.Join(profile, "t")
	return dir, len(dir)+len(singletonSocket) <= socketPathMax
}

func (b *Browser) record(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, s)
}

// Errors returns the script exceptions and console errors seen so far
// (a Content-Security-Policy violation is one).
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// Context is the browser's chromedp context, for actions of one's own.
func (b *Browser) Context() context.Context { return b.ctx }

// Run runs actions within Timeout and fails the test on an error.
func (b *Browser) Run(actions ...chromedp.Action) {
	b.t.Helper()
	if err := b.RunErr(actions...); err != nil {
		b.t.Fatalf("browser: %v (page errors: %v)", err, b.Errors())
	}
}

// RunErr is Run returning the error.
func (b *Browser) RunErr(actions ...chromedp.Action) error {
	ctx, cancel := context.WithTimeout(b.ctx, Timeout)
	defer cancel()
	return chromedp.Run(ctx, actions...)
}

// Open navigates to url and waits for the body.
func (b *Browser) Open(url string) {
	b.t.Helper()
	b.Run(chromedp.Navigate(url), chromedp.WaitReady("body", chromedp.ByQuery))
}

// Text returns the text content of the first element matching the CSS
// selector, failing the test when there is none. It does not wait: use
// WaitFor or WaitText first (chromedp's TextContent would wait for the
// element to be visible, which an empty one never is).
func (b *Browser) Text(sel string) string {
	b.t.Helper()
	return b.property(sel, "textContent")
}

// HTML returns the outer HTML of the first element matching sel.
func (b *Browser) HTML(sel string) string {
	b.t.Helper()
	return b.property(sel, "outerHTML")
}

func (b *Browser) property(sel, prop string) string {
	b.t.Helper()
	var s *string
	q, _ := json.Marshal(sel)
	b.Run(chromedp.Evaluate(fmt.Sprintf(`(function(){var n=document.querySelector(%s);return n?n.%s:null})()`, q, prop), &s))
	if s == nil {
		b.t.Fatalf("browser: no element %s (page errors: %v)", sel, b.Errors())
	}
	return *s
}

// Eval evaluates a script expression in the page into out (may be nil).
func (b *Browser) Eval(expr string, out any) {
	b.t.Helper()
	b.Run(chromedp.Evaluate(expr, out))
}

// WaitFor polls the script expression until it is true, failing the test
// after timeout with what describes the wait.
func (b *Browser) WaitFor(what, expr string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		err := b.RunErr(chromedp.Evaluate("!!("+expr+")", &ok))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("browser: waited %s for %s (%s): last error %v; page errors %v; page text: %s",
				timeout, what, expr, err, b.Errors(), b.pageText())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pageText is the start of the page's visible text, for failure messages.
func (b *Browser) pageText() string {
	var s string
	if err := b.RunErr(chromedp.Evaluate(`document.body ? document.body.innerText.slice(0, 3000) : ""`, &s)); err != nil {
		return "(unavailable: " + err.Error() + ")"
	}
	return s
}

// WaitText waits until the element matching sel contains substr.
func (b *Browser) WaitText(sel, substr string, timeout time.Duration) {
	b.t.Helper()
	b.WaitFor(fmt.Sprintf("%q in %s", substr, sel),
		fmt.Sprintf("(function(){var n=document.querySelector(%q);return n&&n.textContent.indexOf(%q)>=0})()", sel, substr), timeout)
}

// Viewport sets the window size, e.g. 390×844 for a phone.
func (b *Browser) Viewport(w, h int64) {
	b.t.Helper()
	b.Run(chromedp.EmulateViewport(w, h))
}

// Screenshot saves a full-page PNG as <dir>/<name>.png (ScreenshotDir)
// and returns its path.
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	png, err := capture(func() ([]byte, error) {
		var png []byte
		return png, b.RunErr(chromedp.FullScreenshot(&png, 100)) // 100 makes a PNG; below is JPEG
	}, captureTries, 250*time.Millisecond)
	if err != nil {
		b.t.Fatalf("screenshot %s: %v (page errors: %v)", name, err, b.Errors())
	}
	dir, err := ScreenshotDir()
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	b.t.Logf("screenshot %s", p)
	return p
}

const captureTries = 20

// capture calls shoot up to tries times, pause apart, until it gives an
// image. Chromium refuses a capture ("Cannot take screenshot with 0
// width") while the page's frame is being laid out again, as after a
// sign-in form's answer on a loaded machine; a moment later it succeeds.
// Any other error (a hung renderer's timeout) is returned at once.
func capture(shoot func() ([]byte, error), tries int, pause time.Duration) ([]byte, error) {
	var err error
	for i := 0; i < tries; i++ {
		var png []byte
		if png, err = shoot(); err == nil {
			return png, nil
		}
		if !strings.Contains(err.Error(), "Cannot take screenshot") {
			return nil, err
		}
		time.Sleep(pause)
	}
	return nil, fmt.Errorf("%d tries: %w", tries, err)
}

// ScreenshotDir is EUTERPE_SCREENSHOT_DIR, else .run/screenshots in the
// repository (the directory holding go.mod above the test's directory).
func ScreenshotDir() (string, error) {
	if d := os.Getenv("EUTERPE_SCREENSHOT_DIR"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/vesta-cx/euterpe\n") {
			return filepath.Join(d, ".run", "screenshots"), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no go.mod of github.com/vesta-cx/euterpe above " + wd)
		}
	}
}
