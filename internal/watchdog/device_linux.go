package watchdog

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OpenDevice opens a watchdog device write-only: the only file the petter
// opens.
func OpenDevice(path string) (Device, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	return &fileDevice{File: f}, nil
}

type fileDevice struct{ *os.File }

func (d *fileDevice) Identity() (string, error) {
	info, err := unix.IoctlGetWatchdogInfo(int(d.Fd()))
	if err != nil {
		return "", err
	}
	return string(info.Identity[:]), nil
}

func (d *fileDevice) SetTimeout(seconds int) (int, error) {
	v := int32(seconds)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, d.Fd(), uintptr(unix.WDIOC_SETTIMEOUT), uintptr(unsafe.Pointer(&v)))
	if errno != 0 {
		return 0, errno
	}
	return int(v), nil
}
