package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/labstack/echo/v4"
)

//go:embed assets
var assets embed.FS

// Prefix is where every console lives.
const Prefix = "/ui/"

// NavItem is one entry of the navigation bar.
type NavItem struct {
	Title string // shown
	Path  string // absolute, e.g. /ui/jobs
}

// Options configure a Console.
type Options struct {
	// Product names the daemon in the title bar, e.g. "euterpe-edge".
	Product string
	// Nav lists the daemon's pages in order.
	Nav []NavItem
	// Assets, when set, are the daemon's own static files (page scripts),
	// served under /ui/app/.
	Assets fs.FS
	// Funcs are added to every page template (the base layout uses none of
	// their names).
	Funcs template.FuncMap
}

// Console renders a daemon's pages inside the shared layout.
type Console struct {
	opt  Options
	base *template.Template
}

// New parses the base layout.
func New(opt Options) *Console {
	funcs := template.FuncMap{}
	for k, v := range baseFuncs {
		funcs[k] = v
	}
	for k, v := range opt.Funcs {
		funcs[k] = v
	}
	base := template.Must(template.New("base").Funcs(funcs).ParseFS(assets, "assets/base.html"))
	return &Console{opt: opt, base: base}
}

// Page is a page template bound to the layout.
type Page struct {
	c *Console
	t *template.Template
}

// MustPage parses a page. src defines the template "content" (the body of
// the page) and may define "head" (extra elements in <head>, for example
// data attributes for the script) and "scripts" (inline <script> is
// refused by the Content-Security-Policy: put code in a file under
// Assets, or use data-* attributes that console.js reads). Data reaches the
// page through html/template only, which escapes it for its context.
func (c *Console) MustPage(name, src string) *Page {
	t := template.Must(template.Must(c.base.Clone()).New(name).Parse(src))
	return &Page{c: c, t: t}
}

// View is what every page template sees: .Title, .Active (the path of the
// navigation entry to highlight), .Nav, .Product, .CSRF and .Data.
type View struct {
	Title   string
	Active  string
	Product string
	Nav     []NavItem
	// CSRF is the value forms put in their hidden "csrf" field (see
	// Protect); empty when the daemon uses cross-origin checks only.
	CSRF string
	Data any
}

// Render writes the page with status. The body is rendered into a buffer
// first, so a template error becomes a 500 instead of half a page.
func (p *Page) Render(c echo.Context, status int, v View) error {
	v.Product = p.c.opt.Product
	v.Nav = p.c.opt.Nav
	var buf bytes.Buffer
	if err := p.t.ExecuteTemplate(&buf, "layout", v); err != nil {
		return fmt.Errorf("render %s: %w", p.t.Name(), err)
	}
	SecurityHeaders(c.Response().Header())
	return c.HTMLBlob(status, buf.Bytes())
}

// SecurityHeaders sets what every console response carries: no inline or
// foreign script, no framing, no sniffing, no referrer to other sites.
func SecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// servable reports whether an asset request names a file as written: the
// file server cleans the path after our checks, so an unclean one
// (base.html/. is base.html) could reach what a suffix check refused, and
// one ending in / is a directory listing.
func servable(p string) bool { return path.Clean(p) == p && !strings.HasSuffix(p, "/") }

// Mount serves the assets under /ui/assets/ (cacheable: they change only
// with the binary) and redirects /ui to /ui/. Pages are added by the
// daemon on the same echo instance.
func (c *Console) Mount(e *echo.Echo) {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Prefix+"assets/", http.FileServer(http.FS(sub)))
	e.GET(Prefix+"assets/*", func(ec echo.Context) error {
		if p := ec.Request().URL.Path; !servable(p) || strings.HasSuffix(p, ".html") {
			return echo.ErrNotFound // templates and listings are not assets
		}
		h := ec.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(ec.Response(), ec.Request())
		return nil
	})
	if c.opt.Assets != nil {
		app := http.StripPrefix(Prefix+"app/", http.FileServer(http.FS(c.opt.Assets)))
		e.GET(Prefix+"app/*", func(ec echo.Context) error {
			if !servable(ec.Request().URL.Path) {
				return echo.ErrNotFound
			}
			h := ec.Response().Header()
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Cache-Control", "public, max-age=3600")
			app.ServeHTTP(ec.Response(), ec.Request())
			return nil
		})
	}
	e.GET("/ui", func(ec echo.Context) error { return ec.Redirect(http.StatusFound, Prefix) })
}

var baseFuncs = template.FuncMap{
	// navClass marks the active entry.
	"navClass": func(active, path string) string {
		if active == path {
			return "active"
		}
		return ""
	},
}
