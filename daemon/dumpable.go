package daemon

import "log/slog"

// EnvDumpable is the setting that leaves a daemon dumpable, for debugging.
const EnvDumpable = "EUTERPE_DUMPABLE"

// HideFromChildren marks the process non-dumpable, as ssh-agent and
// gpg-agent do. The daemons run programs on media and payloads others
// supplied (ffmpeg, ffprobe, exec backends and stages) as their own user,
// and the kernel lets a process of the same user read another's
// /proc/<pid>/environ, mem and fds: a program taken over by hostile input
// could read the secrets the daemon was started with (the sync secret, the
// database URL's password, the keyring), which unsetting the variables
// would not hide, as environ shows the initial environment. A non-dumpable
// process's /proc entries belong to root. The programs themselves are
// dumpable again, execve resets it. The cost is no core dumps of the
// daemon and no debugger attaching as its user; ApplyDumpable gives them
// back on request.
//
// Programs call it first thing in main, before any setting is read:
// commands their tests run in the test process leave that process as it
// is.
func HideFromChildren() error { return setDumpable(false) }

// DeclareDumpable declares EUTERPE_DUMPABLE (-dumpable) on c.
func DeclareDumpable(c *Config, p *bool) {
	c.Bool(p, "dumpable", EnvDumpable, false,
		"leave the process dumpable, for core dumps and a debugger running as its user; the programs it runs (ffmpeg, exec backends) can then read its environment and memory, secrets included")
}

// ApplyDumpable makes the process dumpable again when the operator asked
// for it (EUTERPE_DUMPABLE=true), and says so in the log, since the
// secrets are then open to the programs the daemon runs. With dumpable
// false it changes nothing.
func ApplyDumpable(log *slog.Logger, dumpable bool) error {
	if !dumpable {
		return nil
	}
	if err := setDumpable(true); err != nil {
		return err
	}
	log.Warn(EnvDumpable + " is set: programs this process runs can read its environment and memory, secrets included")
	return nil
}
