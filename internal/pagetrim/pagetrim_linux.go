//go:build linux

package pagetrim

import (
	"bufio"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Binary advises the kernel to reclaim the pages of this process's binary
// that are not writable (see the package doc). It returns ErrUnsupported
// when the kernel refuses MADV_PAGEOUT.
func Binary() (Result, error) {
	var r Result
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return r, fmt.Errorf("pagetrim: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return r, fmt.Errorf("pagetrim: %w", err)
	}
	all, err := parseMaps(bufio.NewScanner(f))
	_ = f.Close()
	if err != nil {
		return r, err
	}
	r.RSSFileBefore, _ = readRSSFile()
	for _, m := range binaryMappings(all, exe) {
		// The range is the kernel's own mapping of our binary: no Go
		// object lives there, and nothing is written.
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), unix.MADV_PAGEOUT)
		if errno != 0 {
			if errors.Is(errno, unix.EINVAL) || errors.Is(errno, unix.ENOSYS) || errors.Is(errno, unix.EPERM) {
				return r, fmt.Errorf("%w: %w", ErrUnsupported, errno)
			}
			return r, fmt.Errorf("pagetrim: madvise %x-%x: %w", m.start, m.end, errno)
		}
		r.Mappings++
		r.Bytes += m.end - m.start
	}
	r.RSSFileAfter, _ = readRSSFile()
	return r, nil
}
