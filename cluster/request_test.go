package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bmcfence/bmcfence/fence"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range []Request{
		{ID: "r1", Kind: fence.CmdFence, User: "alice", Reason: "disk on fire", At: at(0)},
		{ID: "r2", Kind: fence.CmdConfirm, User: "bob", Reason: "unplugged it myself"},
		{ID: "r3", Kind: fence.CmdAbort},
		{ID: "r4", Kind: fence.CmdUnfence, PowerOn: true, At: at(0)},
	} {
		s, err := EncodeRequest(r)
		if err != nil {
			t.Fatalf("EncodeRequest(%+v): %v", r, err)
		}
		got, err := DecodeRequest(s)
		if err != nil {
			t.Fatalf("DecodeRequest(%s): %v", s, err)
		}
		if diff := cmp.Diff(r, got); diff != "" {
			t.Errorf("round trip of %s (-want +got):\n%s", s, diff)
		}
	}
}

func TestRequestWireFormat(t *testing.T) {
	s, err := EncodeRequest(Request{ID: "r1", Kind: fence.CmdUnfence, User: "alice", Reason: "back", PowerOn: true, At: at(0)})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"r1","kind":"unfence","user":"alice","reason":"back","powerOn":true,"at":"2025-03-01T10:00:00Z"}`
	if s != want {
		t.Errorf("EncodeRequest =\n%s\nwant\n%s", s, want)
	}
	// What the CLI documents, with a field a newer CLI might add.
	r, err := DecodeRequest(`{"id":"x","kind":"confirm","user":"u","reason":"r","powerOn":false,"at":"2025-03-01T10:00:00+01:00","ttl":"1h"}`)
	if err != nil || r.Kind != fence.CmdConfirm || !r.At.Equal(at(-time.Hour)) {
		t.Errorf("DecodeRequest = %+v, %v", r, err)
	}
}

func TestMalformedRequestsAreRejected(t *testing.T) {
	for _, tt := range []struct{ name, value string }{
		{"not JSON", "fence please"},
		{"empty", ""},
		{"unknown kind", `{"id":"r1","kind":"reboot"}`},
		{"kind none", `{"id":"r1","kind":"none"}`},
		{"no kind", `{"id":"r1"}`},
		{"no id", `{"kind":"fence"}`},
		{"blank id", `{"id":"  ","kind":"fence"}`},
		{"bad time", `{"id":"r1","kind":"fence","at":"yesterday"}`},
		{"wrong type", `{"id":1,"kind":"fence"}`},
		{"huge", `{"id":"r1","kind":"fence","reason":"` + strings.Repeat("x", maxRequestLen) + `"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeRequest(tt.value); !errors.Is(err, ErrMalformedRequest) {
				t.Errorf("DecodeRequest = %v, want ErrMalformedRequest", err)
			}
		})
	}
	for _, r := range []Request{{Kind: fence.CmdFence}, {ID: "r1", Kind: fence.CmdNone}, {ID: "r1", Kind: fence.CommandKind(99)}} {
		if _, err := EncodeRequest(r); !errors.Is(err, ErrMalformedRequest) {
			t.Errorf("EncodeRequest(%+v) = %v, want ErrMalformedRequest", r, err)
		}
	}
}

func TestMaintenanceRoundTrip(t *testing.T) {
	m := Maintenance{By: "ops", Reason: "firmware", Since: at(0)}
	s, err := EncodeMaintenance(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMaintenance(s)
	if err != nil || !cmp.Equal(m, got) {
		t.Errorf("DecodeMaintenance(%s) = %+v, %v", s, got, err)
	}
	if _, err := DecodeMaintenance("yes"); err == nil {
		t.Error("DecodeMaintenance(yes) = nil error")
	}
}

// FuzzDecodeRequest: any annotation value decodes or is rejected as
// malformed, never panics, and what decodes re-encodes to the same request.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(`{"id":"r1","kind":"fence","user":"alice","reason":"x","powerOn":false,"at":"2025-03-01T10:00:00Z"}`)
	f.Add(`{"id":"r1","kind":"unfence","powerOn":true}`)
	f.Add(`{"id":"","kind":"abort"}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := DecodeRequest(s)
		if err != nil {
			if !errors.Is(err, ErrMalformedRequest) {
				t.Fatalf("DecodeRequest(%q) = %v, not ErrMalformedRequest", s, err)
			}
			return
		}
		enc, err := EncodeRequest(r)
		if err != nil {
			t.Fatalf("EncodeRequest(%+v) after a successful decode: %v", r, err)
		}
		again, err := DecodeRequest(enc)
		if err != nil || !cmp.Equal(r, again) {
			t.Fatalf("re-decode of %s = %+v, %v; want %+v", enc, again, err, r)
		}
	})
}
