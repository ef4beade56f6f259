package console

// SetListPageSize makes the job and dead-letter lists show n rows a page
// until the returned function restores the size.
func SetListPageSize(n int) (restore func()) {
	old := listPageSize.Swap(int64(n))
	return func() { listPageSize.Store(old) }
}

// EdgeJobEvents is how many events an edge job's page shows.
const EdgeJobEvents = edgeJobEvents
