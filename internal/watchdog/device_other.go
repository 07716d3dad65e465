//go:build !linux

package watchdog

import "errors"

// OpenDevice: watchdog devices are Linux's.
func OpenDevice(path string) (Device, error) {
	return nil, errors.New("the BMC watchdog device needs Linux (ipmi_watchdog)")
}
