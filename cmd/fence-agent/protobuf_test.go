package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	fencingclient "github.com/bmcfence/bmcfence/client/clientset/versioned"
)

// The built-in types travel as protobuf; the project's CRDs, which the
// API server serves as JSON only, keep JSON.
func TestBuiltInTypesAskForProtobuf(t *testing.T) {
	var mu sync.Mutex
	accept := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accept[r.URL.Path] = r.Header.Get("Accept")
		mu.Unlock()
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	kube, err := kubernetes.NewForConfig(withProtobuf(cfg))
	if err != nil {
		t.Fatal(err)
	}
	fencing, err := fencingclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _ = kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	_, _ = fencing.FencingV1alpha1().BMCFenceRecords().List(ctx, metav1.ListOptions{})
	mu.Lock()
	defer mu.Unlock()
	if a := accept["/api/v1/nodes"]; !strings.HasPrefix(a, "application/vnd.kubernetes.protobuf") {
		t.Errorf("nodes: Accept %q, want protobuf first", a)
	}
	if a := accept["/apis/fencing.bmcfence.io/v1alpha1/bmcfencerecords"]; strings.Contains(a, "protobuf") {
		t.Errorf("records: Accept %q, want JSON", a)
	}
	if cfg.ContentType != "" {
		t.Errorf("withProtobuf changed the shared config: %q", cfg.ContentType)
	}
}
