package operators_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

func sets() []sqldb.Migrations {
	return []sqldb.Migrations{schema.Migrations(), operators.Migrations()}
}

func TestCreateAuthenticateDisable(t *testing.T) {
	sqltest.Each(t, sets(), func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := operators.New(db)
		c, err := s.Create(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		var hash string
		if err := db.QueryRow(db.Rebind(`SELECT token_hash FROM operators WHERE id = ?`), c.OperatorID).Scan(&hash); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(hash, c.Token) || !strings.HasPrefix(c.Token, operators.TokenPrefix) {
			t.Fatal("token stored in plaintext or without its prefix")
		}
		op, err := s.Authenticate(ctx, c.Token)
		if err != nil || op.ID != c.OperatorID || op.Name != "alice" {
			t.Fatalf("authenticate: %+v %v", op, err)
		}
		for _, bad := range []string{"", "eop_", c.Token + "x", strings.TrimPrefix(c.Token, operators.TokenPrefix)} {
			if _, err := s.Authenticate(ctx, bad); !errors.Is(err, operators.ErrUnknownToken) {
				t.Errorf("%q: %v", bad, err)
			}
		}
		for _, name := range []string{"", "   ", strings.Repeat("x", 201)} {
			if _, err := s.Create(ctx, name); err == nil {
				t.Errorf("name %q accepted", name)
			}
		}
		if err := s.Disable(ctx, c.OperatorID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(ctx, c.Token); !errors.Is(err, operators.ErrUnknownToken) {
			t.Fatalf("disabled operator authenticated: %v", err)
		}
		if err := s.Disable(ctx, "no-such-id"); !errors.Is(err, operators.ErrNotFound) {
			t.Fatalf("disable unknown: %v", err)
		}
	})
}

// The operator API refuses requesters' API keys and the transcode API
// refuses operator tokens.
func TestAuthMiddlewareSeparatesCredentials(t *testing.T) {
	sqltest.Each(t, sets(), func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		ops := operators.New(db)
		op, err := ops.Create(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		keys, _ := credentials.ParseKeyring("k:"+credentials.NewKey(), "")
		req, err := requesters.New(db, keys).Create(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		e := daemon.NewEcho(nil)
		e.GET("/op", func(c echo.Context) error {
			o, _ := operators.FromContext(c)
			return c.String(http.StatusOK, o.Name)
		}, operators.Auth(ops))
		cases := []struct {
			name, header string
			want         int
		}{
			{"operator token", "Bearer " + op.Token, http.StatusOK},
			{"lower-case scheme", "bearer " + op.Token, http.StatusOK},
			{"requester api key", "Bearer " + req.APIKey, http.StatusUnauthorized},
			{"webhook secret", "Bearer " + req.WebhookSecret, http.StatusUnauthorized},
			{"missing", "", http.StatusUnauthorized},
			{"basic", "Basic " + op.Token, http.StatusUnauthorized},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := httptest.NewRequest(http.MethodGet, "/op", nil)
				if tc.header != "" {
					r.Header.Set("Authorization", tc.header)
				}
				w := httptest.NewRecorder()
				e.ServeHTTP(w, r)
				if w.Code != tc.want {
					t.Fatalf("status %d, want %d: %s", w.Code, tc.want, w.Body)
				}
				if strings.Contains(w.Body.String(), op.Token) || strings.Contains(w.Body.String(), req.APIKey) {
					t.Fatal("a credential was echoed")
				}
			})
		}
		// A database that cannot answer is 503, not 401.
		_ = db.Close()
		r := httptest.NewRequest(http.MethodGet, "/op", nil)
		r.Header.Set("Authorization", "Bearer "+op.Token)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Fatalf("closed database: %d %v", w.Code, w.Header())
		}
	})
}

type failingAuthenticator struct{ err error }

func (f failingAuthenticator) Authenticate(context.Context, string) (operators.Operator, error) {
	return operators.Operator{}, f.err
}

// A token lookup the database cannot answer is 503 with Retry-After; one
// that fails for any other reason (a permission refused, a bug) is a 500
// whose detail reaches the log, not a 503 that says "retry" and hides it.
func TestAuthLookupFailures(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		want       int
		retryAfter string
	}{
		{"database unreachable", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), http.StatusServiceUnavailable, "5"},
		{"permission denied", &pgconn.PgError{Code: "42501", Message: "permission denied for table operators"}, http.StatusInternalServerError, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			e := daemon.NewEcho(slog.New(slog.NewTextHandler(&logs, nil)))
			e.GET("/op", func(c echo.Context) error { return c.NoContent(http.StatusOK) }, operators.Auth(failingAuthenticator{tc.err}))
			r := httptest.NewRequest(http.MethodGet, "/op", nil)
			r.Header.Set("Authorization", "Bearer "+operators.TokenPrefix+"x")
			w := httptest.NewRecorder()
			e.ServeHTTP(w, r)
			if w.Code != tc.want || w.Header().Get("Retry-After") != tc.retryAfter {
				t.Fatalf("%d Retry-After %q, want %d %q: %s", w.Code, w.Header().Get("Retry-After"), tc.want, tc.retryAfter, w.Body)
			}
			if tc.want == http.StatusInternalServerError && !strings.Contains(logs.String(), "42501") {
				t.Errorf("the cause is not logged: %s", logs.String())
			}
		})
	}
}
