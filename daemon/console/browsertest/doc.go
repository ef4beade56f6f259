// Package browsertest drives the distribution's headless Chromium from Go
// tests (through chromedp) against the consoles the daemons serve: it
// opens pages, waits for text, runs script in the page, collects the
// page's script errors and saves screenshots under .run/screenshots/ of
// the repository for the README. Without Chromium a test skips with the
// command that installs it, and fails under CI=true.
package browsertest
