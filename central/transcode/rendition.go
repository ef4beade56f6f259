package transcode

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Rendition is one requested output of a job.
type Rendition struct {
	Name        string `json:"name"`
	Codec       string `json:"codec"`
	BitrateKbps int    `json:"bitrate_kbps,omitempty"` // 0: the codec default (ignored for flac)
	SampleRate  int    `json:"sample_rate,omitempty"`  // 0: keep the source's
	Channels    int    `json:"channels,omitempty"`     // 0: keep the source's
	Container   string `json:"container,omitempty"`    // "": the codec's default container
}

// codec is one row of the codec table: how ffmpeg encodes it and which
// values a rendition may ask for.
type codec struct {
	encoder     string
	lossless    bool
	defaultKbps int
	minKbps     int
	maxKbps     int
	maxChannels int
	sampleRates []int // allowed rates; nil: any in [minRate, maxRate]
	minRate     int
	maxRate     int
	containers  []string // first is the default
	extraArgs   []string
}

// container maps a container name to ffmpeg's muxer, the file extension and
// the Content-Type the object is uploaded with.
type container struct {
	muxer, ext, contentType string
}

var codecs = map[string]codec{
	"opus": {
		encoder: "libopus", defaultKbps: 128, minKbps: 6, maxKbps: 510, maxChannels: 8,
		sampleRates: []int{48000, 24000, 16000, 12000, 8000},
		containers:  []string{"ogg", "opus", "webm", "mka"},
	},
	"aac": {
		encoder: "aac", defaultKbps: 192, minKbps: 8, maxKbps: 512, maxChannels: 8,
		minRate: 8000, maxRate: 96000,
		containers: []string{"m4a", "mp4", "adts", "mka"},
	},
	"mp3": {
		encoder: "libmp3lame", defaultKbps: 192, minKbps: 8, maxKbps: 320, maxChannels: 2,
		sampleRates: []int{8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000},
		containers:  []string{"mp3"},
	},
	"flac": {
		encoder: "flac", lossless: true, maxChannels: 8,
		minRate: 1, maxRate: 655350,
		containers: []string{"flac", "ogg", "mka"},
	},
}

var containers = map[string]container{
	"ogg":  {"ogg", ".ogg", "audio/ogg"},
	"opus": {"opus", ".opus", "audio/ogg"},
	"webm": {"webm", ".webm", "audio/webm"},
	"mka":  {"matroska", ".mka", "audio/x-matroska"},
	"m4a":  {"ipod", ".m4a", "audio/mp4"},
	"mp4":  {"mp4", ".mp4", "audio/mp4"},
	"adts": {"adts", ".aac", "audio/aac"},
	"mp3":  {"mp3", ".mp3", "audio/mpeg"},
	"flac": {"flac", ".flac", "audio/flac"},
}

// Codecs lists the supported codec names, sorted.
func Codecs() []string {
	out := make([]string, 0, len(codecs))
	for k := range codecs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// RenditionError names the field of a rendition that cannot be produced.
type RenditionError struct {
	Rendition string
	Field     string
	Reason    string
}

func (e *RenditionError) Error() string {
	return fmt.Sprintf("rendition %q: %s %s", e.Rendition, e.Field, e.Reason)
}

// Validate checks r against the codec table.
func (r Rendition) Validate() error {
	bad := func(field, reason string) error {
		return &RenditionError{Rendition: r.Name, Field: field, Reason: reason}
	}
	if !safeName.MatchString(r.Name) {
		return bad("name", "must be 1-64 characters of A-Z a-z 0-9 . _ - and not start with . _ or -")
	}
	c, ok := codecs[r.Codec]
	if !ok {
		return bad("codec", fmt.Sprintf("must be one of %v", Codecs()))
	}
	if c.lossless {
		if r.BitrateKbps != 0 {
			return bad("bitrate_kbps", "is not allowed for a lossless codec")
		}
	} else if r.BitrateKbps != 0 && (r.BitrateKbps < c.minKbps || r.BitrateKbps > c.maxKbps) {
		return bad("bitrate_kbps", fmt.Sprintf("must be between %d and %d", c.minKbps, c.maxKbps))
	}
	if r.SampleRate != 0 {
		if c.sampleRates != nil && !slices.Contains(c.sampleRates, r.SampleRate) {
			return bad("sample_rate", fmt.Sprintf("must be one of %v", c.sampleRates))
		}
		if c.sampleRates == nil && (r.SampleRate < c.minRate || r.SampleRate > c.maxRate) {
			return bad("sample_rate", fmt.Sprintf("must be between %d and %d", c.minRate, c.maxRate))
		}
	}
	if r.Channels < 0 || r.Channels > c.maxChannels {
		return bad("channels", fmt.Sprintf("must be between 1 and %d", c.maxChannels))
	}
	if r.Container != "" && !slices.Contains(c.containers, r.Container) {
		return bad("container", fmt.Sprintf("must be one of %v for %s", c.containers, r.Codec))
	}
	return nil
}

func (r Rendition) container() container { return containers[r.ContainerName()] }

// ContainerName is the container the output is written in: the requested
// one, or the codec's default.
func (r Rendition) ContainerName() string {
	if r.Container == "" {
		if c, ok := codecs[r.Codec]; ok {
			return c.containers[0]
		}
	}
	return r.Container
}

// FileName is the output's file name: the rendition name plus the
// container's extension, e.g. "preview.ogg".
func (r Rendition) FileName() string { return r.Name + r.container().ext }

// ContentType is the MIME type the output is stored with.
func (r Rendition) ContentType() string { return r.container().contentType }

// inputArgs confine what ffprobe and ffmpeg read to the source file
// itself. Both pick a demuxer from the content, not the name, and the
// source is the requester's: an HLS playlist (or a DASH manifest) would
// have them read other files of the runner's host, or fetch URLs, and
// encode them into the requester's output. Only the file protocol and
// demuxers of single-file audio and audio-video containers are allowed.
var inputArgs = []string{
	"-protocol_whitelist", "file",
	"-format_whitelist", strings.Join([]string{
		"aac", "ac3", "eac3", "aiff", "amr", "ape", "asf", "au", "avi", "caf", "dsf", "dts", "dtshd",
		"flac", "flv", "iff", "loas", "matroska", "mlp", "mov", "mp3", "mpc", "mpc8", "mpeg", "mpegts",
		"nut", "ogg", "oma", "rm", "shn", "tak", "truehd", "tta", "voc", "w64", "wav", "wv", "xwma",
	}, ","),
}

// Args is the ffmpeg command line (without the program name) that encodes
// the first audio stream of in into out for r, writing machine-readable
// progress to stdout. r must have passed Validate.
func (r Rendition) Args(in, out string) []string {
	c := codecs[r.Codec]
	args := []string{
		"-hide_banner", "-nostdin", "-nostats", "-loglevel", "error", "-y",
	}
	args = append(args, inputArgs...)
	args = append(args,
		"-i", in,
		"-map", "0:a:0", "-vn", "-sn", "-dn",
		"-c:a", c.encoder,
	)
	if !c.lossless {
		kbps := r.BitrateKbps
		if kbps == 0 {
			kbps = c.defaultKbps
		}
		args = append(args, "-b:a", strconv.Itoa(kbps)+"k")
	}
	if r.SampleRate != 0 {
		args = append(args, "-ar", strconv.Itoa(r.SampleRate))
	}
	if r.Channels != 0 {
		args = append(args, "-ac", strconv.Itoa(r.Channels))
	}
	args = append(args, c.extraArgs...)
	args = append(args, "-progress", "pipe:1", "-f", r.container().muxer, out)
	return args
}
