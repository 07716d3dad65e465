package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bmcfence/bmcfence/test/controlplane"
)

// The commands as make build builds them, built once for the tests that
// need them (the image's, the README's flags), in a directory removed when
// the tests end.
var (
	commandsOnce sync.Once
	commandsDir  string
	commandsErr  error
)

const stamp = "v0.0.0-imagetest"

// stampFlags are make build's -ldflags with a fixed version, commit and
// date.
const stampFlags = "-s -w -X github.com/bmcfence/bmcfence/internal/version.Version=" + stamp +
	" -X github.com/bmcfence/bmcfence/internal/version.Commit=0123abc -X github.com/bmcfence/bmcfence/internal/version.Date=2026-01-02T03:04:05Z"

// builtCommands returns a directory holding fence-agent, redfish-mock,
// bmc-watchdog, the BMC-only kubectl-fence (-tags bmcfast) and bmcfence-cli (the whole CLI).
func builtCommands(t *testing.T) string {
	t.Helper()
	commandsOnce.Do(func() {
		root, err := controlplane.RepoRoot()
		if err != nil {
			commandsErr = err
			return
		}
		if commandsDir, commandsErr = os.MkdirTemp("", "hack-commands-"); commandsErr != nil {
			return
		}
		build := func(out string, tags string, pkgs ...string) {
			if commandsErr != nil {
				return
			}
			args := append([]string{"build", "-trimpath", "-tags", tags, "-ldflags", stampFlags, "-o", out}, pkgs...)
			cmd := exec.Command("go", args...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				commandsErr = &buildError{strings.Join(pkgs, " "), err, b}
			}
		}
		// One go build for the untagged four: they link in parallel.
		build(commandsDir+"/", "", "./cmd/fence-agent", "./cmd/redfish-mock", "./cmd/bmc-watchdog", "./cmd/kubectl-fence")
		if commandsErr == nil {
			commandsErr = os.Rename(filepath.Join(commandsDir, "kubectl-fence"), filepath.Join(commandsDir, "bmcfence-cli"))
		}
		build(filepath.Join(commandsDir, "kubectl-fence"), "bmcfast", "./cmd/kubectl-fence")
	})
	if commandsErr != nil {
		t.Fatal(commandsErr)
	}
	return commandsDir
}

type buildError struct {
	pkgs string
	err  error
	out  []byte
}

func (e *buildError) Error() string {
	return "go build " + e.pkgs + ": " + e.err.Error() + "\n" + string(e.out)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if commandsDir != "" {
		_ = os.RemoveAll(commandsDir)
	}
	os.Exit(code)
}
