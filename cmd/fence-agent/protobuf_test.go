package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned"
	"github.com/bmcfence/bmcfence/internal/kube"
)

// The built-in types travel as protobuf, uncompressed; the project's CRDs,
// which the API server serves as JSON only, keep JSON.
func TestBuiltInTypesAskForProtobuf(t *testing.T) {
	var mu sync.Mutex
	accept, encoding := map[string]string{}, map[string]string{}
	// TLS, as the agent's API server: client-go builds its own transport
	// (which honours DisableCompression) only for a TLS config.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accept[r.URL.Path] = r.Header.Get("Accept")
		encoding[r.URL.Path] = r.Header.Get("Accept-Encoding")
		mu.Unlock()
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	builtin, err := kube.NewForConfig(withProtobuf(cfg))
	if err != nil {
		t.Fatal(err)
	}
	fencing, err := fencingclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _ = builtin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	_, _ = fencing.FencingV1alpha1().BMCFenceRecords().List(ctx, metav1.ListOptions{})
	mu.Lock()
	defer mu.Unlock()
	if a := accept["/api/v1/nodes"]; !strings.HasPrefix(a, "application/vnd.kubernetes.protobuf") {
		t.Errorf("nodes: Accept %q, want protobuf first", a)
	}
	if e := encoding["/api/v1/nodes"]; strings.Contains(e, "gzip") {
		t.Errorf("nodes: Accept-Encoding %q, want no compression", e)
	}
	if a := accept["/apis/fencing.bmcfence.io/v1alpha1/bmcfencerecords"]; strings.Contains(a, "protobuf") {
		t.Errorf("records: Accept %q, want JSON", a)
	}
	if cfg.ContentType != "" {
		t.Errorf("withProtobuf changed the shared config: %q", cfg.ContentType)
	}
}
