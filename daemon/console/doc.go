// Package console is the web console both daemons serve at /ui/: embedded
// assets (one stylesheet, one script with safe rendering, a resuming
// Server-Sent Events reader and small SVG charts), an html/template base
// layout whose navigation each daemon fills with its own pages, an
// in-memory history of the daemon's own numbers for the charts (sampled
// from callbacks or from its Prometheus registry, no Prometheus server),
// and the cross-origin protection its forms rely on. Nothing is fetched
// from the internet at run time and no build step runs at build time.
//
// Sub-package browsertest drives a headless Chromium against the pages.
package console
