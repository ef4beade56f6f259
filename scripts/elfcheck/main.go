// Command elfcheck verifies that each file given is a static 64-bit aarch64
// Linux executable: the Jetson runs the cross-built programs without a
// dynamic loader or libc of a matching version, so any PT_INTERP or
// dynamic section is a build mistake.
package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: elfcheck FILE...")
		os.Exit(2)
	}
	failed := false
	for _, path := range os.Args[1:] {
		if err := check(path); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("%s: static aarch64 ELF\n", path)
	}
	if failed {
		os.Exit(1)
	}
}

func check(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	switch {
	case f.Class != elf.ELFCLASS64:
		return fmt.Errorf("class %v, want ELFCLASS64", f.Class)
	case f.Machine != elf.EM_AARCH64:
		return fmt.Errorf("machine %v, want EM_AARCH64", f.Machine)
	case f.Type != elf.ET_EXEC:
		return fmt.Errorf("type %v, want ET_EXEC (a position-dependent static executable)", f.Type)
	}
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			return errors.New("has a PT_INTERP program header: dynamically linked")
		case elf.PT_DYNAMIC:
			return errors.New("has a PT_DYNAMIC segment: dynamically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("imports shared libraries %v", libs)
	}
	return nil
}
