package e2e

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bmcfence/bmcfence/api/fencing/v1alpha1"
)

// The CRDs' own validation (CEL) on the real API server: a forced confirm
// needs a reason, force and powerOn only go with their actions, and a
// request's spec never changes once admitted.
func TestRequestSchemaValidation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	who, err := e.c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	me := who.Status.UserInfo.Username
	reqs := e.fencing().FencingV1alpha1().BMCFenceRequests()
	tests := []struct {
		name    string
		spec    v1alpha1.BMCFenceRequestSpec
		wantErr string
	}{
		{"forced confirm without a reason", v1alpha1.BMCFenceRequestSpec{NodeName: "n1", Action: v1alpha1.ActionConfirm, RequestedBy: me, Force: true}, "force needs a reason"},
		{"force on a fence", v1alpha1.BMCFenceRequestSpec{NodeName: "n1", Action: v1alpha1.ActionFence, RequestedBy: me, Force: true, Reason: "x"}, "force applies to confirm only"},
		{"powerOn on an abort", v1alpha1.BMCFenceRequestSpec{NodeName: "n1", Action: v1alpha1.ActionAbort, RequestedBy: me, PowerOn: true}, "powerOn applies to unfence only"},
		{"unknown action", v1alpha1.BMCFenceRequestSpec{NodeName: "n1", Action: "reboot", RequestedBy: me}, "Unsupported value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := reqs.Create(ctx, &v1alpha1.BMCFenceRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "schema-"}, Spec: tt.spec}, metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("create: %v; want an error containing %q", err, tt.wantErr)
			}
		})
	}
	// An abort of a node that does not exist: admitted, then refused by the
	// agent (none runs here: it stays Pending); its spec cannot change.
	r, err := reqs.Create(ctx, &v1alpha1.BMCFenceRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "schema-"},
		Spec: v1alpha1.BMCFenceRequestSpec{NodeName: "no-such-node", Action: v1alpha1.ActionAbort, RequestedBy: me}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reqs.Delete(context.Background(), r.Name, metav1.DeleteOptions{}) })
	r.Spec.Action = v1alpha1.ActionUnfence
	if _, err := reqs.Update(ctx, r, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("changing an admitted request's spec: %v; want refused as immutable", err)
	}
}
