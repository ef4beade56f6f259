package executor

import (
	"context"
	"time"
)

// SetRename replaces the function that moves files into the trash.
func SetRename(x *Executor, rename func(oldpath, newpath string) error) { x.rename = rename }

// SetHashChunk installs a function called after every chunk a hash job reads.
func SetHashChunk(x *Executor, fn func(bytesDone int64)) { x.hashChunk = fn }

// ReserveIOWait books cost bytes like ReserveIO and returns the wait it
// would sleep, on the store clock.
func ReserveIOWait(ctx context.Context, x *Executor, bucket string, cost int64) (time.Duration, error) {
	return x.reserveIO(ctx, bucket, cost)
}
