// Package pathsafe decides which paths the edge library may touch (protocol
// §8). A source path is accepted only when its real path, every symlink
// resolved, lies under one of the configured library roots; thumbnails and
// trash are written only under directories of the state root. Files are
// opened with O_NOFOLLOW on the resolved path and checked again after
// opening, so a symlink swapped in between check and use is refused rather
// than followed: a link pointing outside a root is never read, hashed,
// thumbnailed or deleted.
package pathsafe
