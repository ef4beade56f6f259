package daemon

// Version is stamped at build time by the Makefile (-X ...daemon.Version).
var Version = "dev"
