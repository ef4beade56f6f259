package testsvc

import (
	stdlog "log"
	"log/slog"
	"os"
	"testing"
)

// KeepDefaultLog puts slog's default logger and the standard log back as
// they were when the test ends: the daemons make their own logger the
// default, and a test that runs one must not leave it to the next.
func KeepDefaultLog(t testing.TB) {
	saved, flags := slog.Default(), stdlog.Flags()
	t.Cleanup(func() {
		slog.SetDefault(saved)
		stdlog.SetOutput(os.Stderr)
		stdlog.SetFlags(flags)
	})
}
