package filehash_test

import "time"

var fixedTime = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
