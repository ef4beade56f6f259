package daemon

import (
	"context"

	"github.com/labstack/echo/v4"
)

const recheckKey = "daemon.recheck"

// SetRecheck records, on a request its auth middleware admitted, how to
// ask again whether the credential behind it (a session, a token) is still
// good. A stream that outlives the moment of admission (Server-Sent
// Events) asks before everything it writes: a sign-out, an expired
// session or a disabled operator must end it, and only the middleware
// knows which credential to look up.
func SetRecheck(c echo.Context, check func(ctx context.Context) error) {
	c.Set(recheckKey, check)
}

// Recheck asks the request's credential check again (SetRecheck); an error
// means the stream must end. A request no middleware set a check on has
// nothing to lose: nil.
func Recheck(c echo.Context) error {
	check, _ := c.Get(recheckKey).(func(ctx context.Context) error)
	if check == nil {
		return nil
	}
	return check(c.Request().Context())
}
