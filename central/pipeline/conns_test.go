package pipeline

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// wrapConnector opens real connections and hands each to wrap.
type wrapConnector struct {
	open func() (driver.Conn, error)
	wrap func(driver.Conn) driver.Conn
}

func (c wrapConnector) Connect(context.Context) (driver.Conn, error) {
	cn, err := c.open()
	if err != nil {
		return nil, err
	}
	return c.wrap(cn), nil
}

func (c wrapConnector) Driver() driver.Driver { return nil }

// wrapDB is a handle on db's database whose connections are wrapped.
func wrapDB(t *testing.T, db *sqldb.DB, wrap func(driver.Conn) driver.Conn) *sqldb.DB {
	t.Helper()
	open := func() (driver.Conn, error) { return stdlib.GetDefaultDriver().Open(dbURL(t, db)) }
	if db.Engine == sqldb.SQLite {
		drv, dsn := db.DB.Driver(), sqldb.SQLiteDSN(db.Path)
		open = func() (driver.Conn, error) { return drv.Open(dsn) }
	}
	h := sql.OpenDB(wrapConnector{open: open, wrap: wrap})
	t.Cleanup(func() { _ = h.Close() })
	return &sqldb.DB{DB: h, Engine: db.Engine, Path: db.Path}
}
