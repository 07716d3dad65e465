package cluster

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
)

// encodeLeases is a LeaseList as the API server sends it in protobuf.
func encodeLeases(t *testing.T, l *coordinationv1.LeaseList) []byte {
	t.Helper()
	enc := scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), coordinationv1.SchemeGroupVersion)
	var buf bytes.Buffer
	if err := enc.Encode(l, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// randomLease is a Lease with everything a kubelet's and a controller's
// Leases carry, some of it absent at random.
func randomLease(r *rand.Rand, i int) coordinationv1.Lease {
	l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: fmt.Sprintf("node-%d", i), Namespace: "kube-node-lease", UID: types.UID(fmt.Sprintf("uid-%d", r.IntN(1e6))),
		ResourceVersion: fmt.Sprint(r.IntN(1e9)), Generation: r.Int64N(9),
		CreationTimestamp: metav1.NewTime(time.Unix(r.Int64N(2e9), 0)),
		Labels:            map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: fmt.Sprintf("node-%d", i), UID: "owner"}},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1",
			Time: ptr.To(metav1.NewTime(time.Unix(r.Int64N(2e9), 0))), FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:renewTime":{}}}`)}}},
	}}
	if r.IntN(4) > 0 {
		l.Spec.HolderIdentity = ptr.To(fmt.Sprintf("holder-%d", r.IntN(100)))
	}
	if r.IntN(4) > 0 {
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Unix(r.Int64N(2e9), r.Int64N(1e9))))
	}
	if r.IntN(2) > 0 {
		l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Unix(r.Int64N(2e9), r.Int64N(1e9))))
		l.Spec.LeaseDurationSeconds = ptr.To(int32(r.IntN(60)))
		l.Spec.LeaseTransitions = ptr.To(int32(r.IntN(9)))
		l.Spec.PreferredHolder = ptr.To("preferred")
	}
	return l
}

// The Lease list read field by field holds, for every Lease, exactly what a
// full decode of the same bytes slimmed by slimLease holds.
func TestDecodeLeaseListKeepsWhatSlimLeaseKeeps(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range []int{0, 1, 7, 300} {
		list := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "42"}}
		for i := range []int{0, 1, 7, 300}[n] {
			list.Items = append(list.Items, randomLease(r, i))
		}
		b := encodeLeases(t, list)
		got, ok, err := decodeLeaseList(b)
		if err != nil || !ok {
			t.Fatalf("%d Leases: ok %v, %v", len(list.Items), ok, err)
		}
		full, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var want []coordinationv1.Lease
		for i := range full.(*coordinationv1.LeaseList).Items {
			s, _ := slimLease(&full.(*coordinationv1.LeaseList).Items[i])
			want = append(want, *s.(*coordinationv1.Lease))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d Leases (-full decode, slimmed +read field by field):\n%s", len(list.Items), diff)
		}
	}
}

func TestDecodeLeaseListRefusesWhatItCannotRead(t *testing.T) {
	good := encodeLeases(t, &coordinationv1.LeaseList{Items: []coordinationv1.Lease{randomLease(rand.New(rand.NewPCG(3, 4)), 1)}})
	paged := encodeLeases(t, &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{Continue: "more"}})
	for name, b := range map[string][]byte{
		"cut short":       good[:len(good)-3],
		"no envelope raw": protobufMagic,
		"paged":           paged,
	} {
		if _, ok, err := decodeLeaseList(b); !ok || err == nil {
			t.Errorf("%s: ok %v, err %v; want protobuf refused", name, ok, err)
		}
	}
	json, err := runtime.Encode(scheme.Codecs.LegacyCodec(coordinationv1.SchemeGroupVersion), &coordinationv1.LeaseList{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := decodeLeaseList(json); ok || err != nil {
		t.Errorf("JSON: ok %v, err %v; want it left to the full decode", ok, err)
	}
}
