package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/daemon"
	dconsole "github.com/vesta-cx/euterpe/daemon/console"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Cookies. The session cookie is scoped to /ui/ so it never reaches the
// JSON APIs, which take bearer tokens only; the sign-in cookie only to the
// sign-in form, for the double-submit check there (no session exists yet
// to bind a token to).
const (
	SessionCookie = "euterpe_console"
	signinCookie  = "euterpe_console_signin"
	signinPath    = dconsole.Prefix + "signin"
	signoutPath   = dconsole.Prefix + "signout"
)

const (
	ctxOperator = "console.operator"
	ctxSession  = "console.session"
)

// secure reports whether the request reached us over TLS: directly, or
// through a proxy we were told to trust.
func (r *Role) secure(req *http.Request) bool {
	if req.TLS != nil {
		return true
	}
	return r.settings.TrustForwardedProto && strings.EqualFold(strings.TrimSpace(req.Header.Get("X-Forwarded-Proto")), "https")
}

func (r *Role) setCookie(c echo.Context, name, value, path string, maxAge int) {
	c.SetCookie(&http.Cookie{Name: name, Value: value, Path: path, MaxAge: maxAge, HttpOnly: true,
		Secure: r.secure(c.Request()), SameSite: http.SameSiteStrictMode})
}

// requireSession lets a request through with a live session; without one a
// page GET goes to the sign-in form and anything else is refused.
func (r *Role) requireSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		var id string
		if ck, err := c.Cookie(SessionCookie); err == nil {
			id = ck.Value
		}
		op, err := r.sessions.Lookup(c.Request().Context(), id)
		switch {
		case errors.Is(err, operators.ErrNoSession):
			if id != "" {
				r.setCookie(c, SessionCookie, "", dconsole.Prefix, -1)
			}
			if c.Request().Method == http.MethodGet && !strings.HasSuffix(c.Path(), ".json") && !strings.HasSuffix(c.Path(), "/events") {
				return c.Redirect(http.StatusSeeOther, signinPath+"?next="+url.QueryEscape(c.Request().URL.RequestURI()))
			}
			return daemon.Errorf(http.StatusUnauthorized, "unauthorized", "sign in to the console first")
		case err != nil && sqldb.OutageReason(err) != "":
			c.Response().Header().Set("Retry-After", strconv.Itoa(daemon.OutageRetryAfter))
			return daemon.Errorf(http.StatusServiceUnavailable, "unavailable", "the session store cannot be reached")
		case err != nil:
			return fmt.Errorf("console session: %w", err)
		}
		c.Set(ctxOperator, op)
		c.Set(ctxSession, id)
		daemon.SetRecheck(c, func(ctx context.Context) error {
			_, err := r.sessions.Lookup(ctx, id)
			return err
		})
		return next(c)
	}
}

// requireCSRF refuses a state-changing request whose synchronizer token
// (form field csrf or header X-CSRF-Token) is not its session's.
func requireCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		switch c.Request().Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return next(c)
		}
		id, _ := c.Get(ctxSession).(string)
		if !operators.CheckCSRF(id, dconsole.FromRequest(c.Request())) {
			return daemon.Errorf(http.StatusForbidden, "csrf", "missing or wrong CSRF token: reload the page and try again")
		}
		return next(c)
	}
}

func operatorOf(c echo.Context) operators.Operator {
	op, _ := c.Get(ctxOperator).(operators.Operator)
	return op
}

func csrfOf(c echo.Context) string {
	id, _ := c.Get(ctxSession).(string)
	if id == "" {
		return ""
	}
	return operators.CSRFToken(id)
}

type signinData struct {
	CSRF, Next, Error string
}

// nextPath keeps a post-sign-in redirect inside the console.
func nextPath(v string) string {
	if !strings.HasPrefix(v, dconsole.Prefix) || strings.HasPrefix(v, "//") || strings.ContainsAny(v, "\\\r\n") {
		return dconsole.Prefix
	}
	return v
}

func (r *Role) signinForm(c echo.Context, status int, next, msg string) error {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	tok := base64.RawURLEncoding.EncodeToString(b)
	r.setCookie(c, signinCookie, tok, signinPath, int((10 * time.Minute).Seconds()))
	return r.ui.signin.Render(c, status, dconsole.View{Title: "Sign in", Active: signinPath,
		Data: signinData{CSRF: tok, Next: nextPath(next), Error: msg}})
}

func (r *Role) getSignin(c echo.Context) error {
	return r.signinForm(c, http.StatusOK, c.QueryParam("next"), "")
}

// postSignin exchanges an operator token for a session. The form is
// protected by a double-submit token (cookie and field must match), since
// there is no session yet; a requester's API key is refused like any
// unknown token. Its fields are read from the posted body only, never the
// query string (which c.FormValue would fall back to): a token in a URL
// stays in proxies' access logs and the browser's history.
func (r *Role) postSignin(c echo.Context) error {
	req := c.Request()
	ck, err := c.Cookie(signinCookie)
	field := req.PostFormValue("csrf")
	if err != nil || ck.Value == "" || field == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(field)) != 1 {
		return daemon.Errorf(http.StatusForbidden, "csrf", "missing or wrong CSRF token: reload the sign-in page and try again")
	}
	next := nextPath(req.PostFormValue("next"))
	s, err := r.sessions.Start(req.Context(), r.deps.Operators, strings.TrimSpace(req.PostFormValue("token")))
	switch {
	case errors.Is(err, operators.ErrUnknownToken):
		r.log.Info("console sign-in refused", "remote", c.RealIP())
		return r.signinForm(c, http.StatusUnauthorized, next, "Unknown or disabled operator token. Requesters' API keys do not open the console.")
	case err != nil:
		return err
	}
	r.log.Info("console sign-in", "operator_id", s.Operator.ID, "operator", s.Operator.Name)
	r.setCookie(c, signinCookie, "", signinPath, -1)
	r.setCookie(c, SessionCookie, s.ID, dconsole.Prefix, int(time.Until(s.ExpiresAt).Seconds()))
	return c.Redirect(http.StatusSeeOther, next)
}

func (r *Role) postSignout(c echo.Context) error {
	id, _ := c.Get(ctxSession).(string)
	if err := r.sessions.End(c.Request().Context(), id); err != nil {
		return err
	}
	r.setCookie(c, SessionCookie, "", dconsole.Prefix, -1)
	return c.Redirect(http.StatusSeeOther, signinPath)
}
