package backend

import (
	"bufio"
	"io"
	"strings"
)

// scanSSE calls fn with the data of every Server-Sent Event in r (multi-line
// data fields joined with "\n") until fn returns false or r ends. Comments,
// event names and ids are ignored: OpenAI-compatible servers put everything
// in data.
func scanSSE(r io.Reader, fn func(data string) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var data []string
	flush := func() bool {
		if len(data) == 0 {
			return true
		}
		d := strings.Join(data, "\n")
		data = data[:0]
		return fn(d)
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
			data = append(data, strings.TrimPrefix(v, " "))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	flush()
	return nil
}
