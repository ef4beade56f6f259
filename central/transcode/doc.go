// Package transcode drives the system ffmpeg and ffprobe for the central
// transcode runner. It turns a requested rendition (codec, bitrate, sample
// rate, channels, container) into an ffmpeg command line from a table of
// codecs, reads a source's duration with ffprobe, runs ffmpeg with
// `-progress pipe:1` so progress can feed the lease heartbeat and status
// events, and kills ffmpeg the moment its context is cancelled (a lost lease
// or a shutdown). Failures are typed: a missing program is an
// infrastructure problem (ErrMissing) that must not burn a job's retries,
// while media ffprobe cannot read (ErrInvalidMedia) or a failing ffmpeg run
// (ErrFailed) are final for that job.
package transcode
