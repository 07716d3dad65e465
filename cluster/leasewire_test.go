package cluster

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/bmcfence/bmcfence/internal/kube"
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
	for _, n := range []int{0, 1, 7, 300} {
		list := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "42"}}
		for i := range n {
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

// envelope wraps Lease messages as the API server sends a LeaseList.
func envelope(kind string, leases ...[]byte) []byte {
	var list []byte
	for _, l := range leases {
		list = protowire.AppendTag(list, leaseListItems, protowire.BytesType)
		list = protowire.AppendBytes(list, l)
	}
	var tm []byte
	tm = protowire.AppendTag(tm, 1, protowire.BytesType)
	tm = protowire.AppendString(tm, "coordination.k8s.io/v1")
	tm = protowire.AppendTag(tm, typeMetaKind, protowire.BytesType)
	tm = protowire.AppendString(tm, kind)
	b := append([]byte(nil), protobufMagic...)
	b = protowire.AppendTag(b, unknownTypeMeta, protowire.BytesType)
	b = protowire.AppendBytes(b, tm)
	b = protowire.AppendTag(b, unknownRaw, protowire.BytesType)
	return protowire.AppendBytes(b, list)
}

// leaseBytes is a Lease named n1 (resourceVersion 7) whose spec holds
// spec's bytes.
func leaseBytes(spec []byte) []byte {
	var meta []byte
	meta = protowire.AppendTag(meta, metaName, protowire.BytesType)
	meta = protowire.AppendString(meta, "n1")
	meta = protowire.AppendTag(meta, metaNamespace, protowire.BytesType)
	meta = protowire.AppendString(meta, "kube-node-lease")
	meta = protowire.AppendTag(meta, metaResourceVersion, protowire.BytesType)
	meta = protowire.AppendString(meta, "7")
	var l []byte
	l = protowire.AppendTag(l, leaseMetadata, protowire.BytesType)
	l = protowire.AppendBytes(l, meta)
	l = protowire.AppendTag(l, leaseSpec, protowire.BytesType)
	return protowire.AppendBytes(l, spec)
}

func microTime(sec, nsec uint64, withSec, withNsec bool) []byte {
	var b []byte
	if withSec {
		b = protowire.AppendTag(b, microSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, sec)
	}
	if withNsec {
		b = protowire.AppendTag(b, microNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, nsec)
	}
	return b
}

func renewSpec(mt []byte) []byte {
	b := protowire.AppendTag(nil, specRenewTime, protowire.BytesType)
	return protowire.AppendBytes(b, mt)
}

// The edge cases of a renewal time, read field by field and in full, agree
// (a review found the empty one read as the epoch: an invented renewal);
// a known field of the wrong wire type is refused by both.
func TestDecodeLeaseListAgreesWithTheFullDecodeOnEdgeCases(t *testing.T) {
	negNanos := uint64(0xffffffffffffffff - 122) // int32(-123)
	for name, spec := range map[string][]byte{
		"renewTime present but empty":   renewSpec(nil),
		"renewTime with nanos only":     renewSpec(microTime(0, 5000, false, true)),
		"renewTime below a microsecond": renewSpec(microTime(1700000000, 123456789, true, true)),
		"renewTime with negative nanos": renewSpec(microTime(1700000000, negNanos, true, true)),
		"renewTime twice":               append(renewSpec(microTime(1, 0, true, false)), renewSpec(microTime(1700000000, 0, true, false))...),
		"no spec fields":                nil,
	} {
		b := envelope("LeaseList", leaseBytes(spec))
		got, ok, err := decodeLeaseList(b)
		if err != nil || !ok {
			t.Errorf("%s: ok %v, %v", name, ok, err)
			continue
		}
		full, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
		if err != nil {
			t.Errorf("%s: the full decode: %v", name, err)
			continue
		}
		s, _ := slimLease(&full.(*coordinationv1.LeaseList).Items[0])
		if diff := cmp.Diff([]coordinationv1.Lease{*s.(*coordinationv1.Lease)}, got); diff != "" {
			t.Errorf("%s (-full decode, slimmed +read field by field):\n%s", name, diff)
		}
	}
	wrong := map[string][]byte{
		"renewTime as a varint": protowire.AppendVarint(protowire.AppendTag(nil, specRenewTime, protowire.VarintType), 5),
		"seconds as fixed64":    renewSpec(protowire.AppendFixed64(protowire.AppendTag(nil, microSeconds, protowire.Fixed64Type), 5)),
	}
	for name, spec := range wrong {
		if _, ok, err := decodeLeaseList(envelope("LeaseList", leaseBytes(spec))); !ok || err == nil {
			t.Errorf("%s: ok %v, err %v; want refused", name, ok, err)
		}
	}
	if _, ok, err := decodeLeaseList(envelope("Status")); ok || err != nil {
		t.Errorf("a Status: ok %v, err %v; want it left to the full decode", ok, err)
	}
}

// A refused list says who may not, as the typed list would (Start's
// CacheSyncError names it), and stays a Forbidden error.
func TestListLeasesKeepsTheServersRefusal(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,` +
			`"message":"leases.coordination.k8s.io is forbidden: User \"system:serviceaccount:x:bmcfence\" cannot list resource \"leases\""}`))
	}))
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = listLeases(context.Background(), cs.CoordinationV1().RESTClient(), cs.CoordinationV1().Leases(corev1.NamespaceNodeLease), &bytes.Buffer{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "system:serviceaccount:x:bmcfence" cannot list`) {
		t.Errorf("listLeases = %v, want the server's Forbidden, saying who", err)
	}
}

// decodeLeaseList reads a LeaseList in the API server's protobuf encoding
// as the poller does (leaseListMessage, eachLeaseItem, decodeLease): what
// the tests compare with the full decode. ok is false when b is not
// protobuf.
func decodeLeaseList(b []byte) (leases []coordinationv1.Lease, ok bool, err error) {
	raw, ok, err := leaseListMessage(b)
	if !ok || err != nil {
		return nil, ok, err
	}
	leases, err = decodeLeaseItems(raw)
	if err != nil {
		return nil, true, err
	}
	return leases, true, nil
}

func decodeLeaseItems(raw []byte) (out []coordinationv1.Lease, err error) {
	err = eachLeaseItem(raw, func(item []byte) error {
		l, err := decodeLease(item)
		out = append(out, l)
		return err
	})
	return out, err
}

// leaseItems reads each Lease of a LeaseList message as the poller does.
func leaseItems(t *testing.T, raw []byte) []coordinationv1.Lease {
	t.Helper()
	out, err := decodeLeaseItems(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
