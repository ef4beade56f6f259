// Package trash keeps the library's trash directory: the lock that
// serialises deletes moving files into it, and the cleaner that empties
// entries older than the retention. The cleaner works only through
// directory descriptors opened without following any symlink, starting at
// the trash directory itself, so nothing outside the trash is ever
// removed: a symlink found inside is unlinked, never followed.
package trash
