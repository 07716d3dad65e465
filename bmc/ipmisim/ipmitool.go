package ipmisim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// Output is what one ipmitool run printed, and how it exited.
type Output struct {
	Stdout, Stderr string
	ExitCode       int
}

// Ipmitool runs `ipmitool -I lanplus -C 3 -H 127.0.0.1 -p PORT -U USER -E ARGS…` against the sim,
// the way the bmclib adapter does: the password travels in IPMITOOL_PASSWORD, never in argv.
// Options such as "-N", "1", "-R", "1" or "-v" may lead ARGS. A non-zero exit is reported in
// Output.ExitCode, not as an error; the error is for ipmitool not running, or ctx ending.
func (s *Sim) Ipmitool(ctx context.Context, args ...string) (Output, error) {
	return runIpmitool(ctx, s.Host(), s.port, s.username, s.password, args...)
}

func runIpmitool(ctx context.Context, host string, port int, user, password string, args ...string) (Output, error) {
	argv := append([]string{"-I", "lanplus", "-C", "3", "-H", host, "-p", strconv.Itoa(port), "-U", user, "-E"}, args...)
	cmd := exec.CommandContext(ctx, "ipmitool", argv...)
	cmd.Env = append(withoutEnv(os.Environ(), "IPMITOOL_PASSWORD"), "IPMITOOL_PASSWORD="+password)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := Output{Stdout: stdout.String(), Stderr: stderr.String()}
	if ctx.Err() != nil {
		return out, fmt.Errorf("ipmisim: ipmitool %s: %w", strings.Join(args, " "), ctx.Err())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.Exited():
		out.ExitCode = exit.ExitCode()
	default:
		return out, fmt.Errorf("ipmisim: ipmitool %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
