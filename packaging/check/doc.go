// Package check tests the .deb packages `make packages` builds: their
// control fields, contents, conffiles and maintainer scripts (dpkg-deb),
// the arm64 programs under qemu-user, and — as root, on a machine without a
// running systemd — a real install, upgrade, removal and purge with dpkg.
//
// It is its own module so that nfpm's dependencies never reach the main
// go.mod and so that `make test` (./... of the main module), which must not
// need root, does not run it: `make packages-check` does, and .ci/run calls
// that. It needs EUTERPE_DIST, DEB_VERSION and VERSION from the Makefile.
package check
