package credentials

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
)

// EncryptionVersion is the envelope format written by Seal: AES-256-GCM
// payload under a per-blob DEK, DEK wrapped by AES-256-GCM under a KEK,
// nonce prepended to each ciphertext, the same AAD on both layers.
const EncryptionVersion = 1

// ErrDecrypt is returned for any blob that does not open: wrong row (AAD),
// tampering, or a KEK no longer in the keyring (see ErrUnknownKEK).
var ErrDecrypt = errors.New("credentials: blob does not decrypt")

// ErrUnknownKEK is returned when a blob names a kek_id the keyring lacks.
var ErrUnknownKEK = errors.New("credentials: unknown kek_id")

// Sealed is one envelope-encrypted blob as stored in four columns
// (…_encrypted, …_dek_wrapped, …_kek_id, …_encryption_version).
type Sealed struct {
	Ciphertext []byte
	WrappedDEK []byte
	KEKID      string
	Version    int
}

// JobAAD binds a storage-credential blob to its job row.
func JobAAD(jobID, requesterID string, credentialVersion int) []byte {
	return []byte("euterpe/storage_creds/v1\x00" + jobID + "\x00" + requesterID + "\x00" + strconv.Itoa(credentialVersion))
}

// WebhookSecretAAD binds a webhook-secret blob to its requester and the
// secret's version (so the current and previous slot cannot be swapped).
func WebhookSecretAAD(requesterID string, secretVersion int) []byte {
	return []byte("euterpe/webhook_secret/v1\x00" + requesterID + "\x00" + strconv.Itoa(secretVersion))
}

// Seal encrypts plaintext under a fresh DEK wrapped by the active KEK.
func (k *Keyring) Seal(plaintext, aad []byte) (Sealed, error) {
	dek := make([]byte, KeySize)
	if _, err := rand.Read(dek); err != nil {
		return Sealed{}, fmt.Errorf("credentials: random DEK: %w", err)
	}
	ct, err := gcmSeal(dek, plaintext, aad)
	if err != nil {
		return Sealed{}, err
	}
	wrapped, err := gcmSeal(k.keys[k.active], dek, aad)
	clear(dek)
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{Ciphertext: ct, WrappedDEK: wrapped, KEKID: k.active, Version: EncryptionVersion}, nil
}

// Open decrypts s; aad must be the one it was sealed with.
func (k *Keyring) Open(s Sealed, aad []byte) ([]byte, error) {
	dek, err := k.unwrap(s, aad)
	if err != nil {
		return nil, err
	}
	defer clear(dek)
	pt, err := gcmOpen(dek, s.Ciphertext, aad)
	if err != nil {
		return nil, ErrDecrypt
	}
	return pt, nil
}

func (k *Keyring) unwrap(s Sealed, aad []byte) ([]byte, error) {
	if s.Version != EncryptionVersion {
		return nil, fmt.Errorf("%w: encryption_version %d", ErrDecrypt, s.Version)
	}
	kek, ok := k.keys[s.KEKID]
	if !ok {
		if isKey(s.KEKID) {
			// An older build took a key where the id goes: the id is key
			// material, so it is not shown (as ParseKeyring does).
			return nil, fmt.Errorf("%w (the blob's kek_id reads as a key and is not shown)", ErrUnknownKEK)
		}
		return nil, fmt.Errorf("%w %q", ErrUnknownKEK, s.KEKID)
	}
	dek, err := gcmOpen(kek, s.WrappedDEK, aad)
	if err != nil || len(dek) != KeySize {
		return nil, ErrDecrypt
	}
	return dek, nil
}

// Rewrap re-wraps s's DEK under the active KEK; the payload ciphertext is
// unchanged. changed is false when s already uses the active KEK.
func (k *Keyring) Rewrap(s Sealed, aad []byte) (out Sealed, changed bool, err error) {
	if s.KEKID == k.active {
		return s, false, nil
	}
	dek, err := k.unwrap(s, aad)
	if err != nil {
		return s, false, err
	}
	defer clear(dek)
	// Prove the payload opens under this AAD before committing to the rewrap.
	if _, err := gcmOpen(dek, s.Ciphertext, aad); err != nil {
		return s, false, ErrDecrypt
	}
	wrapped, err := gcmSeal(k.keys[k.active], dek, aad)
	if err != nil {
		return s, false, err
	}
	return Sealed{Ciphertext: s.Ciphertext, WrappedDEK: wrapped, KEKID: k.active, Version: EncryptionVersion}, true, nil
}

func gcmSeal(key, plaintext, aad []byte) ([]byte, error) {
	g, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, g.NonceSize(), g.NonceSize()+len(plaintext)+g.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("credentials: nonce: %w", err)
	}
	return g.Seal(nonce, nonce, plaintext, aad), nil
}

func gcmOpen(key, ct, aad []byte) ([]byte, error) {
	g, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	if len(ct) < g.NonceSize() {
		return nil, ErrDecrypt
	}
	return g.Open(nil, ct[:g.NonceSize()], ct[g.NonceSize():], aad)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	return cipher.NewGCM(b)
}
