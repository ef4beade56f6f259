// Package requesters manages the cloud services allowed to submit
// transcode jobs. A requester has an API key, stored only as a SHA-256
// hash (the key is 256 random bits, so a fast hash is enough and lookups
// stay one indexed read), and a webhook signing secret, stored encrypted
// with the credentials keyring because the dispatcher needs the plaintext
// to sign. Rotating the secret keeps the previous one for an overlap window
// so receivers can switch without dropping events.
package requesters
