package procgroup

import "bytes"

// Output collects what a program prints, up to Max bytes, and notes that
// more came (Overflowed). A write never fails: exec's copy from the
// program's pipe would stop and leave the program blocked on a full pipe.
// It is not an embedded bytes.Buffer on purpose: that copy would use the
// buffer's ReadFrom and read everything, past the limit.
type Output struct {
	Max  int
	buf  bytes.Buffer
	over bool
}

func (o *Output) Write(p []byte) (int, error) {
	if room := o.Max - o.buf.Len(); room < len(p) {
		o.over = true
		if room > 0 {
			o.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return o.buf.Write(p)
}

// Overflowed reports whether the program printed more than Max bytes.
func (o *Output) Overflowed() bool { return o.over }

func (o *Output) Bytes() []byte  { return o.buf.Bytes() }
func (o *Output) String() string { return o.buf.String() }
