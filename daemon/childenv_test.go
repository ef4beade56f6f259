package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChildEnvDropsSecrets(t *testing.T) {
	env := []string{
		"PATH=/usr/bin",
		"HOME=/var/lib/euterpe",
		"LANG=C.UTF-8",
		"EUTERPE_KEYRING=k1:AAAA",
		"EUTERPE_DATABASE_URL=postgres://u:pw@db/x",
		"EUTERPE_REDIS_URL=redis://:pw@h:6379/0",
		"EUTERPE_LLM_API_KEY=sk-1",
		"PGPASSWORD=pw",
		"PGPASSFILE=/etc/pgpass",
		"DATABASE_URL=postgres://u:pw@db/x",
		"REDISCLI_AUTH=pw",
		"AWS_ACCESS_KEY_ID=AK",
		"AWS_SECRET_ACCESS_KEY=SK",
		"AWS_SESSION_TOKEN=ST",
		"CREDENTIALS_DIRECTORY=/run/credentials/euterpe-central.service",
		"PGPASSWORD_HINT=kept", // another variable sharing a prefix without the "="
		"AWS_REGION=eu-west-1",
	}
	require.Equal(t, []string{"PATH=/usr/bin", "HOME=/var/lib/euterpe", "LANG=C.UTF-8", "PGPASSWORD_HINT=kept", "AWS_REGION=eu-west-1"},
		ChildEnv(env))
	require.Empty(t, ChildEnv(nil))
}
