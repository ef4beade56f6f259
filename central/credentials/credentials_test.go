package credentials_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/credentials"
)

func TestSealOpenBindsAAD(t *testing.T) {
	k, err := credentials.ParseKeyring("a:"+credentials.NewKey(), "")
	if err != nil {
		t.Fatal(err)
	}
	st := credentials.Storage{Output: credentials.S3{AccessKeyID: "AK", SecretAccessKey: "SECRET"}}
	sealed, err := k.SealStorage(st, "job1", "req1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if sealed.KEKID != "a" || sealed.Version != credentials.EncryptionVersion || strings.Contains(string(sealed.Ciphertext), "SECRET") {
		t.Fatalf("sealed: %+v", sealed)
	}
	got, err := k.OpenStorage(sealed, "job1", "req1", 1)
	if err != nil || got.Output.SecretAccessKey != "SECRET" {
		t.Fatalf("open: %v", err)
	}
	for name, open := range map[string]func() error{
		"other job":       func() error { _, err := k.OpenStorage(sealed, "job2", "req1", 1); return err },
		"other requester": func() error { _, err := k.OpenStorage(sealed, "job1", "req2", 1); return err },
		"other version":   func() error { _, err := k.OpenStorage(sealed, "job1", "req1", 2); return err },
		"tampered": func() error {
			s := sealed
			s.Ciphertext = append([]byte(nil), s.Ciphertext...)
			s.Ciphertext[len(s.Ciphertext)-1] ^= 1
			_, err := k.OpenStorage(s, "job1", "req1", 1)
			return err
		},
		"unknown kek": func() error {
			s := sealed
			s.KEKID = "zzz"
			_, err := k.OpenStorage(s, "job1", "req1", 1)
			return err
		},
	} {
		if err := open(); !errors.Is(err, credentials.ErrDecrypt) && !errors.Is(err, credentials.ErrUnknownKEK) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if s := st.String() + (&st).GoString(); strings.Contains(s, "SECRET") {
		t.Fatal("Storage prints its secret")
	}
}

func TestRotationAndRewrap(t *testing.T) {
	ka, kb := credentials.NewKey(), credentials.NewKey()
	old, _ := credentials.ParseKeyring("a:"+ka, "")
	sealed, _ := old.Seal([]byte("payload"), []byte("aad"))
	ring, err := credentials.ParseKeyring("a:"+ka+",b:"+kb, "b")
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := ring.Open(sealed, []byte("aad")); err != nil || string(pt) != "payload" {
		t.Fatalf("old kek_id must still open: %v", err)
	}
	out, changed, err := ring.Rewrap(sealed, []byte("aad"))
	if err != nil || !changed || out.KEKID != "b" || string(out.Ciphertext) != string(sealed.Ciphertext) {
		t.Fatalf("rewrap: %v %v %+v", err, changed, out.KEKID)
	}
	onlyB, _ := credentials.ParseKeyring("b:"+kb, "")
	if pt, err := onlyB.Open(out, []byte("aad")); err != nil || string(pt) != "payload" {
		t.Fatalf("rewrapped blob under b: %v", err)
	}
	if _, _, err := ring.Rewrap(sealed, []byte("other")); err == nil {
		t.Fatal("rewrap with the wrong AAD succeeded")
	}
}

func TestParseKeyringErrorsHideKeys(t *testing.T) {
	short := "c2hvcnQta2V5" // "short-key"
	for _, spec := range []string{"", "nokey", "a:" + short, "a:!!!notbase64", "a:" + credentials.NewKey() + ",a:" + credentials.NewKey()} {
		_, err := credentials.ParseKeyring(spec, "")
		if err == nil {
			t.Errorf("%q accepted", spec)
			continue
		}
		if strings.Contains(err.Error(), short) || strings.Contains(err.Error(), "!!!") {
			t.Errorf("error shows key material: %v", err)
		}
	}
	if _, err := credentials.ParseKeyring("a:"+credentials.NewKey(), "b"); err == nil {
		t.Error("active key outside the ring accepted")
	}
	// A key where the kek_id goes would be logged and stored in the open:
	// it never seals.
	k1, k2 := credentials.NewKey(), credentials.NewKey()
	for _, tc := range []struct{ spec, active string }{
		{k1 + ":" + k2, ""},
		{strings.TrimRight(k1, "=") + ":" + k2, ""},
		{"a:" + k2, k2},
		{"a:" + k2 + "," + k1 + ":" + k2, k1},
		{"a:" + k2 + "," + k1 + ":!!!", "a"},
		{"a:" + k2 + "," + k1 + ":" + k2 + "," + k1 + ":" + k2, "a"},
	} {
		_, err := credentials.ParseKeyring(tc.spec, tc.active)
		if err == nil {
			t.Errorf("a key as kek_id accepted (%d bytes)", len(tc.spec))
			continue
		}
		if strings.Contains(err.Error(), strings.TrimRight(k1, "=")) || strings.Contains(err.Error(), strings.TrimRight(k2, "=")) {
			t.Errorf("error shows key material: %v", err)
		}
	}
}

func TestLocalKeyFile(t *testing.T) {
	dir := t.TempDir()
	k1, created, err := credentials.LoadOrCreateLocal(dir)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	st, err := os.Stat(filepath.Join(dir, credentials.LocalKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", st.Mode(), err)
	}
	k2, created, err := credentials.LoadOrCreateLocal(dir)
	if err != nil || created || k2.ActiveID() != k1.ActiveID() {
		t.Fatalf("reload: %v %v", created, err)
	}
	s, _ := k1.Seal([]byte("x"), nil)
	if pt, err := k2.Open(s, nil); err != nil || string(pt) != "x" {
		t.Fatal("reloaded key differs")
	}
}

// TestLooseLocalKeyFileRefused: a central-kek its group or others may read
// seals nothing from them; it is refused, naming the file and the fix,
// like a loose _FILE secret, and the error never holds the key.
func TestLooseLocalKeyFileRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		dir := t.TempDir()
		if _, _, err := credentials.LoadOrCreateLocal(dir); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, credentials.LocalKeyFile)
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		key, _ := os.ReadFile(p)
		_, _, err := credentials.LoadOrCreateLocal(dir)
		if err == nil || !strings.Contains(err.Error(), "chmod 0600") || !strings.Contains(err.Error(), p) {
			t.Fatalf("mode %04o: err = %v, want a refusal naming the file and chmod 0600", mode, err)
		}
		if _, secret, _ := strings.Cut(strings.TrimSpace(string(key)), ":"); strings.Contains(err.Error(), secret) {
			t.Fatal("the error holds the key")
		}
	}
}

// TestLocalKEKCreatedAtomically: processes starting together on a fresh
// state directory all load the one key; none reads a half-written file.
func TestLocalKEKCreatedAtomically(t *testing.T) {
	for round := range 50 {
		dir := filepath.Join(t.TempDir(), "state")
		const n = 8
		ids := make([]string, n)
		errs := make([]error, n)
		start := make(chan struct{})
		done := make(chan int, n)
		for i := range n {
			go func() {
				<-start
				k, _, err := credentials.LoadOrCreateLocal(dir)
				if err == nil {
					ids[i] = k.ActiveID()
				}
				errs[i] = err
				done <- i
			}()
		}
		close(start)
		for range n {
			<-done
		}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: loader %d: %v", round, i, errs[i])
			}
			if ids[i] != ids[0] {
				t.Fatalf("round %d: loaders disagree on the key: %s and %s", round, ids[0], ids[i])
			}
		}
	}
}

// Credentials handed to a logger or a format verb by mistake show no
// secret: fmt's verbs, and slog's text and JSON handlers, which marshal a
// struct's fields unless it redacts itself.
func TestCredentialsNeverPrintSecrets(t *testing.T) {
	c := credentials.S3{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "very-secret-key", SessionToken: "very-secret-token"}
	st := credentials.Storage{Source: &c, SourceURL: "https://b.example/o?X-Amz-Signature=very-secret-sig", Output: c}
	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&buf, nil), slog.NewTextHandler(&buf, nil)} {
		slog.New(h).Info("creds", "storage", st, "s3", c, "ptr", &c)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		fmt.Fprintf(&buf, verb+"\n", st)
		fmt.Fprintf(&buf, verb+"\n", c)
		fmt.Fprintf(&buf, verb+"\n", &c)
	}
	if out := buf.String(); strings.Contains(out, "very-secret") {
		t.Fatalf("a secret was printed:\n%s", out)
	}
}

// An entry an older build accepted with a key as its kek_id still opens
// what it sealed, beside a named active key, so `keys rewrap` can move
// those values off it; it is counted for the warning.
func TestKeyLikeEntryStaysReadable(t *testing.T) {
	oldID, oldKey := credentials.NewKey(), credentials.NewKey()
	legacy, err := credentials.ParseKeyring(oldID+":"+oldKey+",k1:"+credentials.NewKey(), "k1")
	if err != nil {
		t.Fatal(err)
	}
	if legacy.KeyLikeIDs() != 1 || legacy.ActiveID() != "k1" {
		t.Fatalf("key-like entries %d, active %q", legacy.KeyLikeIDs(), legacy.ActiveID())
	}
	// A value the older build sealed under that entry: its blob names the
	// entry by the key-like id.
	sealer, err := credentials.ParseKeyring("k0:"+oldKey, "")
	if err != nil {
		t.Fatal(err)
	}
	aad := []byte("row-1")
	blob, err := sealer.Seal([]byte("webhook secret"), aad)
	if err != nil {
		t.Fatal(err)
	}
	blob.KEKID = oldID
	if pt, err := legacy.Open(blob, aad); err != nil || string(pt) != "webhook secret" {
		t.Fatalf("open: %q %v", pt, err)
	}
	moved, changed, err := legacy.Rewrap(blob, aad)
	if err != nil || !changed || moved.KEKID != "k1" {
		t.Fatalf("rewrap: %+v %v %v", moved.KEKID, changed, err)
	}
}

// A blob whose kek_id reads as a key (an older build took a key where the
// id goes) and whose entry has left the keyring: the error must not quote
// that id, which is key material, yet still match ErrUnknownKEK.
func TestUnknownKEKErrorHidesKeyLikeID(t *testing.T) {
	k, err := credentials.ParseKeyring("k1:"+credentials.NewKey(), "")
	if err != nil {
		t.Fatal(err)
	}
	aad := []byte("row-1")
	blob, err := k.Seal([]byte("payload"), aad)
	if err != nil {
		t.Fatal(err)
	}
	keyID := credentials.NewKey()
	for _, tc := range []struct {
		name, id, hidden string
		shown            bool
	}{
		{"key-like", keyID, strings.TrimRight(keyID, "="), false},
		{"key-like unpadded", strings.TrimRight(keyID, "="), strings.TrimRight(keyID, "="), false},
		{"plain name", "kek-2024", "kek-2024", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := blob
			b.KEKID = tc.id
			_, openErr := k.Open(b, aad)
			_, _, rewrapErr := k.Rewrap(b, aad)
			for _, err := range []error{openErr, rewrapErr} {
				if !errors.Is(err, credentials.ErrUnknownKEK) {
					t.Fatalf("err %v, want ErrUnknownKEK", err)
				}
				if strings.Contains(err.Error(), tc.hidden) != tc.shown {
					t.Fatalf("error %q: kek_id shown %v, want %v", err, !tc.shown, tc.shown)
				}
			}
		})
	}
}
