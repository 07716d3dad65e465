package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/internal/kube"
)

// The agent's own client (internal/kube: its typed clients, scheme and
// discovery, written for it) against the real API server, with protobuf as
// the agent sends it: every verb the agent uses, the errors callers test
// for (NotFound, Conflict), discovery of a served and an unserved group,
// and the reviews of the metrics endpoint.
func TestKubeClientAgainstTheAPIServer(t *testing.T) {
	cp := controlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := cp.RESTConfig()
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	info, err := c.Discovery().ServerVersion()
	if err != nil || info.GitVersion == "" {
		t.Fatalf("ServerVersion = %+v, %v", info, err)
	}
	for gv, want := range map[string]string{"v1": "nodes", "coordination.k8s.io/v1": "leases", "storage.k8s.io/v1": "volumeattachments"} {
		list, err := c.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Fatalf("resources of %s: %v", gv, err)
		}
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == want }) {
			t.Errorf("resources of %s lack %s: %+v", gv, want, list.APIResources)
		}
	}
	if _, err := c.Discovery().ServerResourcesForGroupVersion("nothing.bmcfence.dev/v1"); !apierrors.IsNotFound(err) {
		t.Errorf("an unserved group: %v, want NotFound", err)
	}

	// A Node: create, get, list, watch, patch, update, delete.
	nodes := c.CoreV1().Nodes()
	w, err := nodes.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=kube-client-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	n, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kube-client-test"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if got, ok := ev.Object.(*corev1.Node); ev.Type != watch.Added || !ok || got.Name != n.Name {
			t.Errorf("watch: %s %T, want ADDED *v1.Node", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("watch: no event for the new Node")
	}
	if got, err := nodes.Get(ctx, n.Name, metav1.GetOptions{}); err != nil || got.UID != n.UID {
		t.Fatalf("get: %v, %v", got, err)
	}
	list, err := nodes.List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/hostname notin (x)"})
	if err != nil || !slices.ContainsFunc(list.Items, func(x corev1.Node) bool { return x.Name == n.Name }) {
		t.Fatalf("list: %d nodes, %v", len(list.Items), err)
	}
	patched, err := nodes.Patch(ctx, n.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"bmcfence.dev/test":"1"}}}`), metav1.PatchOptions{FieldManager: "test"})
	if err != nil || patched.Annotations["bmcfence.dev/test"] != "1" {
		t.Fatalf("patch: %v, %v", patched.Annotations, err)
	}
	stale := n.DeepCopy()
	stale.Labels = map[string]string{"stale": "yes"}
	if _, err := nodes.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("an update from a stale read: %v, want Conflict", err)
	}
	patched.Labels = map[string]string{"fresh": "yes"}
	if _, err := nodes.Update(ctx, patched, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update: %v", err)
	}
	if err := nodes.Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Get(ctx, n.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: %v, want NotFound", err)
	}

	// A Lease and an Event, in their namespaces.
	lease, err := c.CoordinationV1().Leases(metav1.NamespaceDefault).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-client-test"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("test")},
	}, metav1.CreateOptions{})
	if err != nil || lease.Namespace != metav1.NamespaceDefault {
		t.Fatalf("lease: %v, %v", lease, err)
	}
	ev, err := c.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "kube-client-test"},
		InvolvedObject: corev1.ObjectReference{Kind: "Lease", Namespace: metav1.NamespaceDefault, Name: lease.Name},
		Reason:         "Test", Message: "one", Type: corev1.EventTypeNormal, Count: 1,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev, err = c.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, ev.Name, types.StrategicMergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{})
	if err != nil || ev.Count != 2 {
		t.Fatalf("event patch: %v, %v", ev, err)
	}
	if _, err := c.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "no-such-daemonset", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a missing DaemonSet: %v, want NotFound", err)
	}
	if _, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("volume attachments: %v", err)
	}

	// The metrics endpoint's reviews.
	tr, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "not-a-token"}}, metav1.CreateOptions{})
	if err != nil || tr.Status.Authenticated {
		t.Errorf("a review of a bogus token: %+v, %v", tr.Status, err)
	}
	sar, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "nobody", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil || sar.Status.Allowed {
		t.Errorf("a review of nobody reading /metrics: %+v, %v", sar.Status, err)
	}
}
