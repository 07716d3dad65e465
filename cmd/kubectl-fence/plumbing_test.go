//go:build !bmcfast

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeAPI is an API server that knows three nodes and no ConfigMap, on
// 127.0.0.1 (stopped at cleanup); it returns a kubeconfig for it.
func fakeAPI(t *testing.T) (kubeconfig string, requests *atomic.Int64) {
	t.Helper()
	requests = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/nodes":
			list := corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}}
			for _, n := range []string{"worker-2", "worker-1", "cp-1"} {
				list.Items = append(list.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
			}
			_ = json.NewEncoder(w).Encode(list)
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: r.URL.Path + " not found"})
		}
	}))
	t.Cleanup(srv.Close)
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ctx, context: {cluster: c, user: u, namespace: default}}]
current-context: ctx
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, requests
}

// kubectl's own connection flags, through cli-runtime's ConfigFlags, and
// "kubectl fence" in help and usage.
func TestKubectlNativeFlagsAndHelp(t *testing.T) {
	out, _, code := cli(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"kubectl fence [flags]", "kubectl fence [command]", "--as string", "--as-group stringArray", "--server string",
		"--token string", "--request-timeout string", "-v, --v Level", "--context string", "-n, --namespace string"} {
		if !strings.Contains(out, want) {
			t.Errorf("help does not show %q", want)
		}
	}
	if strings.Contains(out, "kubectl-fence ") {
		t.Errorf("help says kubectl-fence, not kubectl fence:\n%s", out)
	}
}

func TestVersionCommand(t *testing.T) {
	out, _, code := cli(t, "version", "-o", "json")
	var v map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v["version"] == "" || v["go"] == "" {
		t.Errorf("version -o json: exit %d, output %q", code, out)
	}
	out, _, code = cli(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "kubectl-fence ") {
		t.Errorf("--version: exit %d, output %q", code, out)
	}
}

// kubectl fence <command> <TAB> offers the cluster's node names
// (kubectl runs kubectl_complete-fence, which calls __complete).
func TestNodeNameCompletion(t *testing.T) {
	kc, _ := fakeAPI(t)
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"fence", ""}, []string{"cp-1", "worker-1", "worker-2"}},
		{[]string{"power", "off", "wor"}, []string{"worker-1", "worker-2"}},
		{[]string{"status", "worker-1", ""}, []string{"cp-1", "worker-2"}},
		{[]string{"fence", "worker-1", ""}, nil},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := append([]string{"__complete", "--kubeconfig", kc}, tt.args...)
			out, _, code := cli(t, args...)
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if line != "" && !strings.HasPrefix(line, ":") && !strings.HasPrefix(line, "Completion ended") {
					got = append(got, line)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("completions (-want +got):\n%s", diff)
			}
		})
	}
}

// A wrong -n must not mean an empty inventory.
func TestMissingAgentConfigMapNamesTheNamespace(t *testing.T) {
	kc, _ := fakeAPI(t)
	_, errOut, code := cli(t, "status", "--kubeconfig", kc, "-n", "fencing")
	if code != exitUsage || !strings.Contains(errOut, `ConfigMap fencing/bmcfence-agent was not found: is bmcfence installed in namespace "fencing"?`) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	// The context's namespace ("default") is not the agent's.
	_, errOut, _ = cli(t, "status", "--kubeconfig", kc)
	if !strings.Contains(errOut, "bmcfence-system/bmcfence-agent") {
		t.Errorf("without -n: stderr %q, want the default namespace bmcfence-system", errOut)
	}
}

// bmc off|on --dry-run check the BMC as a real command would: one that
// answers nothing fails the dry run as it would fail the command, and
// nothing is sent.
func TestBMCDryRunReachesTheBMC(t *testing.T) {
	t.Setenv("BMC_PASSWORD", "pw")
	for _, op := range []string{"off", "on"} {
		out, errOut, code := cli(t, "bmc", op, "--address", "https://127.0.0.1:1", "--username", "admin", "--password-env", "BMC_PASSWORD", "--dry-run", "-o", "json")
		if code != exitUnreachable || !strings.Contains(out, `"dryRun": true`) || !strings.Contains(out, `"action": "`+op+`"`) {
			t.Errorf("bmc %s --dry-run: exit %d, stdout %q, stderr %q", op, code, out, errOut)
		}
	}
}

// The plugin completion script hands kubectl's words to __complete.
func TestPluginCompletionScript(t *testing.T) {
	dir := t.TempDir()
	fake := "#!/bin/sh\nprintf '%s|' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "kubectl-fence"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("./kubectl_complete-fence", "power", "off", "")
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil || string(out) != "__complete|power|off||" {
		t.Errorf("kubectl_complete-fence: %v, output %q", err, out)
	}
}
