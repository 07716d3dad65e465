package kube_test

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/bmcfence/bmcfence/internal/kube"
	"github.com/bmcfence/bmcfence/internal/kube/clientgo"
)

// client-go's Clientset and its fake, wrapped, are ours too: tests and
// kubectl-fence pass theirs.
var (
	_ kube.Interface = clientgo.Wrap(kubernetes.Interface(nil))
	_ kube.Interface = clientgo.Wrap((*fake.Clientset)(nil))
)

func TestNewForConfigSharesOneRateLimiter(t *testing.T) {
	cs, err := kube.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", QPS: 100, Burst: 200})
	if err != nil {
		t.Fatal(err)
	}
	core := cs.CoreV1().RESTClient().GetRateLimiter()
	if core == nil {
		t.Fatal("no rate limiter for QPS 100")
	}
	for name, got := range map[string]any{
		"coordination/v1": cs.CoordinationV1().RESTClient().GetRateLimiter(),
		"storage/v1":      cs.StorageV1().RESTClient().GetRateLimiter(),
		"apps/v1":         cs.AppsV1().RESTClient().GetRateLimiter(),
	} {
		if got != core {
			t.Errorf("%s has its own rate limiter: the groups must share one budget", name)
		}
	}
	if qps := core.QPS(); qps != 100 {
		t.Errorf("QPS %v, want 100", qps)
	}
}

func TestNewForConfigRefusesQPSWithoutBurst(t *testing.T) {
	if _, err := kube.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", QPS: 5}); err == nil {
		t.Fatal("a QPS without a burst was accepted")
	}
}
