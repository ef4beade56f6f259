// Package webhook is both ends of Euterpe's signed callbacks (contract §8).
//
// The sending side (Sign, NewHeaders, SetHeaders) is used by the outbox
// dispatcher for status webhooks and by transcode workers for credential
// refresh calls: every request carries x-euterpe-timestamp (Unix seconds),
// x-euterpe-nonce (random, new per attempt), x-euterpe-event-id (stable across
// retries) and x-euterpe-signature, an HMAC-SHA256 over
// timestamp + "." + nonce + "." + raw_body with the requester's secret, sent
// as "v1=<lowercase hex>". While a secret is rotated both signatures are sent,
// space-separated, so a receiver holding either secret accepts the request.
//
// The receiving side (Verify, Verifier) is what requesters import: it checks
// the timestamp against a skew window, the signature in constant time against
// every secret it holds, and records the nonce in a NonceStore so a captured
// request cannot be replayed inside the window. SeenEvents helps receivers
// act once per event_id, since delivery is at least once.
package webhook
