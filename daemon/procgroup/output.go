package procgroup

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// Output collects what a program prints, up to Max bytes, and notes that
// more came (Overflowed). A write never fails: exec's copy from the
// program's pipe would stop and leave the program blocked on a full pipe.
// It is not an embedded bytes.Buffer on purpose: that copy would use the
// buffer's ReadFrom and read everything, past the limit.
//
// Exec writes each of a program's outputs from a goroutine of its own: read
// an Output once Wait has returned.
type Output struct {
	Max int
	// Tail keeps the last Max bytes rather than the first: a program that
	// fails says why at the end of its stderr (a traceback's last line,
	// after the progress it logged), in a ring of Max bytes.
	Tail bool
	// OnOverflow, when set, is called once, as more than Max bytes come,
	// from the goroutine copying the program's output: it lets the caller
	// stop a program whose output is already unusable instead of draining
	// it until its timeout. It must not block.
	OnOverflow func()

	buf   []byte
	start int // with Tail, where the oldest byte is once buf is full
	n     int // bytes written
	over  bool
}

func (o *Output) Write(p []byte) (int, error) {
	o.n += len(p)
	if o.Tail {
		o.keepTail(p)
	} else if room := o.Max - len(o.buf); room > 0 {
		o.buf = append(o.buf, p[:min(room, len(p))]...)
	}
	if !o.over && o.n > o.Max {
		o.over = true
		if o.OnOverflow != nil {
			o.OnOverflow()
		}
	}
	return len(p), nil
}

// keepTail adds p to the ring of the last Max bytes.
func (o *Output) keepTail(p []byte) {
	if o.Max <= 0 {
		return
	}
	if len(p) >= o.Max {
		o.buf, o.start = append(o.buf[:0], p[len(p)-o.Max:]...), 0
		return
	}
	if room := o.Max - len(o.buf); room > 0 {
		k := min(room, len(p))
		o.buf, p = append(o.buf, p[:k]...), p[k:]
	}
	for len(p) > 0 {
		k := copy(o.buf[o.start:], p)
		p, o.start = p[k:], (o.start+k)%o.Max
	}
}

// Overflowed reports whether the program printed more than Max bytes.
func (o *Output) Overflowed() bool { return o.over }

// Bytes returns what was kept, oldest first.
func (o *Output) Bytes() []byte {
	if o.start != 0 {
		o.buf, o.start = append(o.buf[o.start:len(o.buf):len(o.buf)], o.buf[:o.start]...), 0
	}
	return o.buf
}

func (o *Output) String() string { return string(o.Bytes()) }

// Ending returns the end of what a Tail Output kept, for an error message
// of at most max bytes, so the program's last words — the error itself —
// reach the message. The text is made valid UTF-8 (invalid bytes and NUL
// become U+FFFD, as daemon.CapMessage makes them, so capping it later does
// not grow it) and trimmed of white space. redact, when not nil, hides the
// secrets in it before it is cut: cut first, a URL could lose what marks
// its password. Text whose beginning was lost or is cut here starts with
// "…" and, where a line begins within the bytes kept, at that line.
func (o *Output) Ending(max int, redact func(string) string) string {
	b := o.Bytes()
	lost := o.Tail && o.over
	if lost {
		// The ring's first line is a fragment: drop it when a whole line
		// follows.
		if i := bytes.IndexByte(b, '\n'); i >= 0 && len(bytes.TrimSpace(b[i+1:])) > 0 {
			b = b[i+1:]
		} else {
			// The ring may have cut a character: its rest is not the
			// program's invalid bytes, to show as U+FFFD.
			for k := 0; k < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); k++ {
				b = b[1:]
			}
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.TrimSpace(strings.ReplaceAll(s, "\x00", "\uFFFD"))
	if redact != nil {
		s = redact(s)
	}
	if !lost && len(s) <= max {
		return s
	}
	const mark = "…"
	room := max - len(mark)
	if room <= 0 {
		return ""
	}
	if len(s) > room {
		s = s[len(s)-room:]
		if i := strings.IndexByte(s, '\n'); i >= 0 && strings.TrimSpace(s[i+1:]) != "" {
			s = s[i+1:]
		} else {
			for s != "" && !utf8.RuneStart(s[0]) {
				s = s[1:]
			}
		}
	}
	return mark + s
}
