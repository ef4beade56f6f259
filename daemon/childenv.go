package daemon

import "strings"

// childSecrets are the variables, by prefix, a daemon's helper programs are
// started without: every EUTERPE_ setting (the keyring, database and Redis
// URLs with their passwords, API keys, signing secrets), libpq's and
// redis-cli's password variables, cloud credentials, and systemd's
// credential directory.
var childSecrets = []string{"EUTERPE_", "PGPASSWORD=", "PGPASSFILE=", "DATABASE_URL=", "REDISCLI_AUTH=",
	"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=", "CREDENTIALS_DIRECTORY="}

// ChildEnv is env (usually os.Environ()) without the daemon's secrets, for
// the programs it runs on data it did not write: ffmpeg and ffprobe parse
// media someone else supplied, so a flaw in a demuxer runs with whatever
// the daemon hands it, and they need none of the keys that unseal stored
// credentials, the database or Redis URLs, tokens or cloud credentials.
// (Nor can such a program read the daemon's own /proc/<pid>/environ: the
// daemon is non-dumpable, see HideFromChildren, unless EUTERPE_DUMPABLE is
// set.) A program that needs a setting is given it explicitly, by argument.
func ChildEnv(env []string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, p := range childSecrets {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
