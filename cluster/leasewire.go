package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/bmcfence/bmcfence/internal/kube"
)

// The API server's protobuf envelope: these four bytes, then a
// runtime.Unknown whose raw field holds the object (k8s.io/apimachinery's
// runtime/serializer/protobuf).
var protobufMagic = []byte{0x6b, 0x38, 0x73, 0x00}

// Field numbers, from the generated.proto files of k8s.io/api and
// k8s.io/apimachinery (stable: protobuf field numbers are part of
// Kubernetes' API compatibility).
const (
	unknownTypeMeta = 1 // runtime.Unknown.typeMeta
	unknownRaw      = 2 // runtime.Unknown.raw
	typeMetaKind    = 2 // runtime.TypeMeta.kind

	leaseListMetadata = 1 // LeaseList.metadata
	leaseListItems    = 2 // LeaseList.items
	listMetaContinue  = 3 // ListMeta.continue

	leaseMetadata = 1 // Lease.metadata
	leaseSpec     = 2 // Lease.spec

	metaName            = 1 // ObjectMeta.name
	metaNamespace       = 3 // ObjectMeta.namespace
	metaUID             = 5 // ObjectMeta.uid
	metaResourceVersion = 6 // ObjectMeta.resourceVersion

	specHolderIdentity = 1 // LeaseSpec.holderIdentity
	specRenewTime      = 4 // LeaseSpec.renewTime

	microSeconds = 1 // MicroTime.seconds
	microNanos   = 2 // MicroTime.nanos
)

// leaseListMessage takes the LeaseList message out of the API server's
// protobuf envelope (a slice of b). ok is false when b is not a LeaseList
// in protobuf (an API server that answered JSON, another kind): the caller
// decodes it in full.
func leaseListMessage(b []byte) (raw []byte, ok bool, err error) {
	if !bytes.HasPrefix(b, protobufMagic) {
		return nil, false, nil
	}
	env := b[len(protobufMagic):]
	if tm, err := field(env, unknownTypeMeta); err != nil {
		return nil, true, fmt.Errorf("the Lease list's envelope: %w", err)
	} else if kind, err := field(tm, typeMetaKind); err != nil || string(kind) != "LeaseList" {
		return nil, false, nil // another kind: the full decode says what
	}
	raw, err = field(env, unknownRaw)
	if err != nil {
		return nil, true, fmt.Errorf("the Lease list's envelope: %w", err)
	}
	return raw, true, nil
}

// eachLeaseItem calls f with each Lease message of a LeaseList message,
// in order; a list that says it has more pages is refused.
func eachLeaseItem(raw []byte, f func(item []byte) error) error {
	err := each(raw, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		if num == leaseListMetadata {
			if c, err := field(v, listMetaContinue); err == nil && len(c) > 0 {
				return errLeaseListPaged
			}
			return nil
		}
		if num != leaseListItems {
			return nil
		}
		return f(v)
	})
	if err != nil {
		return fmt.Errorf("the Lease list: %w", err)
	}
	return nil
}

// leaseIdentity reads a Lease message's namespace, name and
// resourceVersion, as slices of b: enough to know a Lease listed again
// unchanged, without building it.
func leaseIdentity(b []byte) (namespace, name, resourceVersion []byte, err error) {
	err = each(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != leaseMetadata {
			return nil
		}
		if err := wantType(num, typ, protowire.BytesType); err != nil {
			return err
		}
		return each(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			switch num {
			case metaName, metaNamespace, metaResourceVersion:
				if err := wantType(num, typ, protowire.BytesType); err != nil {
					return err
				}
			}
			switch num {
			case metaName:
				name = v
			case metaNamespace:
				namespace = v
			case metaResourceVersion:
				resourceVersion = v
			}
			return nil
		})
	})
	return namespace, name, resourceVersion, err
}

// wantType refuses a known field sent with another wire type, as the full
// decode does: skipping it would read a renewal as absent (the node looks
// silent) or a name as empty.
func wantType(num protowire.Number, typ, want protowire.Type) error {
	if typ != want {
		return fmt.Errorf("field %d has wire type %d, want %d", num, typ, want)
	}
	return nil
}

func decodeLease(b []byte) (coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	err := each(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case leaseMetadata, leaseSpec:
			if err := wantType(num, typ, protowire.BytesType); err != nil {
				return err
			}
		}
		switch num {
		case leaseMetadata:
			return each(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				switch num {
				case metaName, metaNamespace, metaUID, metaResourceVersion:
					if err := wantType(num, typ, protowire.BytesType); err != nil {
						return err
					}
				}
				switch num {
				case metaName:
					l.Name = string(v)
				case metaNamespace:
					l.Namespace = string(v)
				case metaUID:
					l.UID = types.UID(v)
				case metaResourceVersion:
					l.ResourceVersion = string(v)
				}
				return nil
			})
		case leaseSpec:
			return each(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				switch num {
				case specHolderIdentity, specRenewTime:
					if err := wantType(num, typ, protowire.BytesType); err != nil {
						return err
					}
				}
				switch num {
				case specHolderIdentity:
					h := string(v)
					l.Spec.HolderIdentity = &h
				case specRenewTime:
					t, err := decodeMicroTime(v)
					if err != nil {
						return fmt.Errorf("renewTime: %w", err)
					}
					l.Spec.RenewTime = &t
				}
				return nil
			})
		}
		return nil
	})
	return l, err
}

func decodeMicroTime(b []byte) (metav1.MicroTime, error) {
	if len(b) == 0 {
		// A zero time is sent as an empty message: no renewal time, as
		// MicroTime.Unmarshal reads it (not the epoch).
		return metav1.MicroTime{}, nil
	}
	var sec, nsec int64
	err := each(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case microSeconds, microNanos:
			if err := wantType(num, typ, protowire.VarintType); err != nil {
				return err
			}
		default:
			return nil
		}
		x, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return protowire.ParseError(n)
		}
		switch num {
		case microSeconds:
			sec = int64(x)
		case microNanos:
			nsec = int64(int32(x))
		}
		return nil
	})
	// As MicroTime.Unmarshal builds it: microseconds, local time.
	nsec = int64(time.Duration(nsec).Truncate(time.Microsecond))
	return metav1.NewMicroTime(time.Unix(sec, nsec).Local()), err
}

// field returns the last occurrence of a length-delimited field (protobuf's
// rule for a repeated singular field: the last wins).
func field(b []byte, want protowire.Number) ([]byte, error) {
	var out []byte
	found := false
	err := each(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == want && typ == protowire.BytesType {
			out, found = v, true
		}
		return nil
	})
	if err == nil && !found {
		err = fmt.Errorf("no field %d", want)
	}
	return out, err
}

// each calls f with every field of the message b: its number, its wire
// type, and its value (a length-delimited field's contents, a varint's
// encoding, a fixed field's bytes).
func each(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			x, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			v, n = x, m
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			v, n = b[:m], m
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

var errLeaseListPaged = errors.New("the Lease list came in pages although none was asked for")

// listLeases lists the node Leases, a consistent read (no
// resourceVersion), and returns the LeaseList message in protobuf. Through
// a real REST client it is the API server's answer read into buf (the
// slice is valid until buf is used again): one buffer for every list, and
// nothing decoded here. An answer in JSON, or a fake client's typed List,
// is encoded as the API server would have sent it.
func listLeases(ctx context.Context, rci rest.Interface, typed kube.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList], buf *bytes.Buffer) ([]byte, error) {
	rc, ok := rci.(*rest.RESTClient)
	if !ok || rc == nil {
		l, err := typed.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Marshal()
	}
	body, err := rc.Get().Namespace(corev1.NamespaceNodeLease).Resource("leases").Stream(ctx)
	if err != nil {
		return nil, err // the server's Status decoded: a 403 says who may not
	}
	buf.Reset()
	_, err = buf.ReadFrom(body)
	_ = body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the Lease list: %w", err)
	}
	b := buf.Bytes()
	raw, ok, err := leaseListMessage(b)
	if ok || err != nil {
		return raw, err
	}
	obj, _, err := kube.Codecs.UniversalDeserializer().Decode(b, nil, &coordinationv1.LeaseList{})
	if err != nil {
		return nil, fmt.Errorf("the Lease list: %w", err)
	}
	l, ok := obj.(*coordinationv1.LeaseList)
	if !ok {
		return nil, fmt.Errorf("the Lease list: got a %T", obj)
	}
	return l.Marshal()
}
