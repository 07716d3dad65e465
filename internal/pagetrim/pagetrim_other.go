//go:build !linux

package pagetrim

// Binary is a no-op outside Linux.
func Binary() (Result, error) { return Result{}, ErrUnsupported }
