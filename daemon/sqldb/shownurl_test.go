package sqldb

import "testing"

func TestShownURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"postgres://euterpe:1234/Xy9SECRET@db.example:5432/euterpe", "postgres://[REDACTED]@db.example:5432/euterpe"},
		{"postgres://u:pw@db:5432/x?sslmode=disable", "postgres://[REDACTED]@db:5432/x?sslmode=disable"},
		{"postgres://u:p@ss@db/x", "postgres://[REDACTED]@db/x"},
		{"postgres://u:ab?cd@db/x", "postgres://[REDACTED]@db/x"},
		{"postgres://u:ab#cd@db/x", "postgres://[REDACTED]@db/x"},
		{"postgres://db/x?user=u&password=pw&sslpassword=pw2", "postgres://db/x?user=u&password=[REDACTED]&sslpassword=[REDACTED]"},
		{"postgres://db/x?%zz=pw", "postgres://db/x?%zz=[REDACTED]"},
		{"postgresql://db.example/euterpe", "postgresql://db.example/euterpe"},
		{"postgres://db/x#frag", "postgres://db/x"},
		{"postgres://euterpe@127.0.0.1:1/central?application_name=central@pod-7&password=hunter2secret&connect_timeout=1",
			"postgres://[REDACTED]@pod-7&password=[REDACTED]&connect_timeout=1"},
		{"postgres://u:pa?ss@db/x?password=hunter2secret", "postgres://[REDACTED]@db/x?password=[REDACTED]"},
		{"postgres://db/x?options=-c%20a@b&sslpassword=hunter2secret", "postgres://[REDACTED]@b&sslpassword=[REDACTED]"},
		{"no scheme at all", "[unparseable URL]"},
	} {
		if got := shownURL(tt.in); got != tt.want {
			t.Errorf("shownURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
