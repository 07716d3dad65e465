//go:build !bmcfast

package main

import "context"

// The whole CLI handles every command itself; only the BMC-only front
// (root_bmcfast.go) hands commands over.

func handOver(context.Context, []string, streams) (int, bool) { return 0, false }

func handOverOn(context.Context, error, []string, streams) (int, bool) { return 0, false }
