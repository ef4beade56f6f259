package watch

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"

	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
)

// mountsUnderRoots is the lines of the mount table (w.MountInfo) whose
// mount point is a root or lies in one, in the table's order; a mount or
// unmount there, or a disk mounted again (a new mount id), changes it.
// false when the table cannot be read (no /proc): nothing is compared.
func (w *Watcher) mountsUnderRoots() (string, bool) {
	data, err := os.ReadFile(w.MountInfo)
	if err != nil {
		return "", false
	}
	var out strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw":
		// the fifth field is the mount point, octal-escaped.
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPoint(fields[4])
		for _, r := range w.Roots {
			if pathsafe.Under(r, mp) {
				out.WriteString(line)
				out.WriteByte('\n')
				break
			}
		}
	}
	if sc.Err() != nil {
		return "", false
	}
	return out.String(), true
}

// unescapeMountPoint undoes the kernel's escaping of a mount point in
// mountinfo: a space, tab, newline or backslash is written \ooo in octal.
func unescapeMountPoint(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
