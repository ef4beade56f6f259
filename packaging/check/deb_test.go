package check

import (
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Each of the four packages declares the right name, version, architecture
// and relations, holds the programs for its architecture, the unit, the
// conffiles and the maintainer scripts, and nothing from another package's
// paths (so the two install side by side).
func TestPackageContents(t *testing.T) {
	b := need(t)
	dpkgDeb := tool(t, "dpkg-deb", "dpkg")
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, s := range specs {
		for _, arch := range arches {
			t.Run(s.name+"_"+arch, func(t *testing.T) {
				deb := b.deb(s.name, arch)
				want := map[string]string{"Package": s.name, "Version": b.debVersion, "Architecture": arch}
				for k, v := range s.fields {
					want[k] = v
				}
				for field, v := range want {
					if got := strings.TrimSpace(run(t, dpkgDeb, "--field", deb, field)); got != v {
						t.Errorf("%s: %q, want %q", field, got, v)
					}
				}

				listing := contents(t, dpkgDeb, deb)
				for path, mode := range map[string]string{
					"/usr/bin/" + s.program:                      "-rwxr-xr-x",
					"/usr/lib/" + s.name + "/euterpectl":         "-rwxr-xr-x",
					"/lib/systemd/system/" + s.unit:              "-rw-r--r--",
					s.envFile:                                    "-rw-r--r--",
					s.credsDir:                                   "drwx------",
					"/usr/share/doc/" + s.name + "/packaging.md": "-rw-r--r--",
				} {
					got, ok := listing[path]
					if !ok {
						t.Errorf("%s is missing", path)
						continue
					}
					if !strings.HasPrefix(got, mode+" root/root") {
						t.Errorf("%s: %s, want %s root/root", path, got, mode)
					}
				}
				if _, ok := listing["/usr/bin/euterpectl"]; ok {
					t.Error("/usr/bin/euterpectl is shipped directly: it must be an alternative, both packages have it")
				}
				if _, ok := listing[s.stateDir]; ok {
					t.Errorf("%s is shipped: systemd's StateDirectory= owns it", s.stateDir)
				}

				ctrl := t.TempDir()
				run(t, dpkgDeb, "--control", deb, ctrl)
				conffiles, err := os.ReadFile(filepath.Join(ctrl, "conffiles"))
				if err != nil {
					t.Fatal(err)
				}
				got := strings.Fields(string(conffiles))
				slices.Sort(got)
				if !slices.Equal(got, s.conffiles) {
					t.Errorf("conffiles %v, want %v", got, s.conffiles)
				}
				for _, script := range []string{"postinst", "prerm", "postrm"} {
					st, err := os.Stat(filepath.Join(ctrl, script))
					if err != nil || st.Mode().Perm()&0o111 == 0 {
						t.Errorf("maintainer script %s missing or not executable: %v", script, err)
					}
				}
				postinst, _ := os.ReadFile(filepath.Join(ctrl, "postinst"))
				for _, w := range []string{"adduser --system", "update-alternatives --install /usr/bin/euterpectl"} {
					if !strings.Contains(string(postinst), w) {
						t.Errorf("postinst lacks %q", w)
					}
				}
				// Installing never enables or starts a daemon: the operator
				// does, once the env file is right.
				for _, line := range strings.Split(string(postinst), "\n") {
					line = strings.TrimSpace(line)
					for _, bad := range []string{"systemctl enable", "systemctl start", "deb-systemd-helper enable", "deb-systemd-invoke start"} {
						if strings.HasPrefix(line, bad) {
							t.Errorf("postinst runs %q", line)
						}
					}
				}

				// The programs are static ELF files for the package's
				// architecture.
				root := t.TempDir()
				run(t, dpkgDeb, "--extract", deb, root)
				for _, p := range []string{"usr/bin/" + s.program, "usr/lib/" + s.name + "/euterpectl"} {
					f, err := elf.Open(filepath.Join(root, p))
					if err != nil {
						t.Fatalf("%s: %v", p, err)
					}
					if f.Machine != machine[arch] {
						t.Errorf("%s is %v, want %v", p, f.Machine, machine[arch])
					}
					for _, prog := range f.Progs {
						if prog.Type == elf.PT_INTERP {
							t.Errorf("%s is dynamically linked", p)
						}
					}
					_ = f.Close()
				}
			})
		}
	}
}

// The arm64 programs, taken from the arm64 packages, run `version` under
// qemu-user and print the version the Makefile stamped.
func TestArm64ProgramsRunUnderQemu(t *testing.T) {
	b := need(t)
	dpkgDeb := tool(t, "dpkg-deb", "dpkg")
	qemu := tool(t, "qemu-aarch64-static", "qemu-user-static")
	for _, s := range specs {
		t.Run(s.name, func(t *testing.T) {
			root := t.TempDir()
			run(t, dpkgDeb, "--extract", b.deb(s.name, "arm64"), root)
			for _, p := range []string{"usr/bin/" + s.program, "usr/lib/" + s.name + "/euterpectl"} {
				if got := strings.TrimSpace(run(t, qemu, filepath.Join(root, p), "version")); got != b.version {
					t.Errorf("%s version under qemu: %q, want %q", p, got, b.version)
				}
			}
		})
	}
}

// contents maps each path of the package's data to its `ls -l`-like mode
// and owner columns.
func contents(t *testing.T, dpkgDeb, deb string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(run(t, dpkgDeb, "--contents", deb), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		path := strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")
		out[path] = f[0] + " " + f[1]
	}
	return out
}
