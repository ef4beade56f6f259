package backend

import (
	"bufio"
	"errors"
	"io"
	"strings"
)

// maxEvent bounds one event: a line, and the data lines of one event
// together. Without the second bound a server that never ends an event
// (no blank line) would have every data line kept until the call's
// timeout.
const maxEvent = 4 << 20

// errEventTooLarge is returned when one event's data exceeds maxEvent.
var errEventTooLarge = errors.New("event larger than 4 MiB")

// scanSSE calls fn("data", …) with the data of every Server-Sent Event in r
// (multi-line data fields joined with "\n") until fn returns false or r
// ends. Comments, event names and ids are ignored: OpenAI-compatible
// servers put everything in data. An "error:" line, which is no SSE field
// but is how llama.cpp's server reports a failure in the middle of a
// stream, is passed at once as fn("error", value).
func scanSSE(r io.Reader, fn func(field, value string) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEvent)
	var data []string
	size := 0
	flush := func() bool {
		if len(data) == 0 {
			return true
		}
		d := strings.Join(data, "\n")
		data, size = data[:0], 0
		return fn("data", d)
	}
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if !flush() {
				return nil
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "data:"); ok {
			v = strings.TrimPrefix(v, " ")
			if size += len(v) + 1; size > maxEvent {
				return errEventTooLarge
			}
			data = append(data, v)
			continue
		}
		if v, ok := strings.CutPrefix(line, "error:"); ok {
			if !fn("error", strings.TrimPrefix(v, " ")) {
				return nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	flush()
	return nil
}
