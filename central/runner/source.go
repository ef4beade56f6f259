package runner

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/central/transcode"
)

// ErrReplacesSource: a key the job writes (an output's final key, or the
// key an attempt of it stages it at) is its own source object. Promoting
// over it would destroy the requester's data, and a retry would transcode
// the output instead of the source.
var ErrReplacesSource = errors.New("an output would replace the source object")

// checkSource refuses a job whose outputs would be written over its source:
// the same bucket on the same server (storage.SameBucket) and a key it
// writes. A signed URL source is compared only when it names an object of
// the output bucket in a form storage.URLKey reads.
func checkSource(j *inbox.Job, rends []transcode.Rendition) error {
	src, ok := storage.SourceIn(j.Source.URL, storage.Bucket{Endpoint: j.Source.Endpoint, Name: j.Source.Bucket}, j.Source.Key,
		storage.Bucket{Endpoint: j.Output.Endpoint, Region: j.Output.Region, Name: j.Output.Bucket})
	if !ok {
		return nil
	}
	for _, rd := range rends {
		if src == storage.ObjectKey(j.Output.Prefix, rd.FileName()) || stagedAs(j.Output.Prefix, j.ID, src, rd.FileName()) {
			return fmt.Errorf("rendition %s: output.prefix %q writes the source object %s/%s: %w",
				rd.Name, j.Output.Prefix, j.Output.Bucket, src, ErrReplacesSource)
		}
	}
	return nil
}

// stagedAs reports whether key is where an attempt of job jobID stages the
// file name under prefix (attemptKey, for any claim version, or the
// legacyAttemptKey a runner of an earlier release would use for it): that
// attempt would upload over it and then delete it.
func stagedAs(prefix, jobID, key, name string) bool {
	dir, ok := strings.CutSuffix(key, "/"+name)
	if !ok {
		return false
	}
	seg, ok := strings.CutPrefix(dir[strings.LastIndex(dir, "/")+1:], ".euterpe-attempt-")
	if !ok {
		return false
	}
	// The claim version ends the segment in both forms (a job id has
	// dashes of its own).
	v, err := strconv.ParseInt(seg[strings.LastIndex(seg, "-")+1:], 10, 64)
	if err != nil || v <= 0 {
		return false
	}
	return key == attemptKey(prefix, jobID, v, name) || key == legacyAttemptKey(prefix, v, name)
}
