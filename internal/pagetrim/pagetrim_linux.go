//go:build linux

package pagetrim

import (
	"bufio"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Binary unmaps the pages of this process's binary that are not writable
// (see the package doc); they are mapped back on their next use.
func Binary() (Result, error) {
	var r Result
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return r, fmt.Errorf("pagetrim: %w", err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return r, fmt.Errorf("pagetrim: %w", err)
	}
	all, err := parseSmaps(bufio.NewScanner(f))
	_ = f.Close()
	if err != nil {
		return r, err
	}
	if r.RSSFileBefore, err = readRSSFile(); err != nil {
		return r, err
	}
	for _, m := range binaryMappings(all, exe) {
		// The range is the kernel's mapping of our binary, read-only,
		// with no page of the process's own (binaryMappings): no Go
		// object lives there, and every page is the file's.
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), unix.MADV_DONTNEED)
		if errno != 0 {
			if errors.Is(errno, unix.EINVAL) || errors.Is(errno, unix.ENOSYS) || errors.Is(errno, unix.EPERM) {
				return r, fmt.Errorf("%w: madvise: %w", ErrUnsupported, errno)
			}
			return r, fmt.Errorf("pagetrim: madvise %x-%x: %w", m.start, m.end, errno)
		}
		r.Mappings++
		r.Bytes += m.end - m.start
	}
	if r.RSSFileAfter, err = readRSSFile(); err != nil {
		return r, err
	}
	return r, nil
}
