package pipeline

import (
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

func timePtr(v *int64) *time.Time {
	if v == nil {
		return nil
	}
	t := sqldb.FromMicros(*v)
	return &t
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt(v *int) int {
	if v == nil {
		return 0
	}
	return *v
}
