package trash

// SetBeforeOpen installs a function the cleaner calls with an entry's path
// right before it opens or removes it.
func SetBeforeOpen(c *Cleaner, fn func(path string)) { c.beforeOpen = fn }
