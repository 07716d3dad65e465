package bmc

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAddress(t *testing.T) {
	tests := []struct {
		in      string
		want    Endpoint
		wantErr string
	}{
		{in: "https://10.0.0.5", want: Endpoint{Redfish, "https", "10.0.0.5", 443}},
		{in: "https://bmc.example:8443", want: Endpoint{Redfish, "https", "bmc.example", 8443}},
		{in: "HTTPS://bmc.example/", want: Endpoint{Redfish, "https", "bmc.example", 443}},
		{in: "http://127.0.0.1:8000", want: Endpoint{Redfish, "http", "127.0.0.1", 8000}},
		{in: "ipmi://10.0.0.6", want: Endpoint{IPMI, "ipmi", "10.0.0.6", 623}},
		{in: "ipmi://[::1]:6230", want: Endpoint{IPMI, "ipmi", "::1", 6230}},
		{in: "10.0.0.5", wantErr: "want https://HOST[:PORT]"},
		{in: "", wantErr: "want https://HOST[:PORT]"},
		{in: "ftp://10.0.0.5", wantErr: `unknown scheme "ftp"`},
		{in: "https://10.0.0.5/redfish/v1/Systems/1", wantErr: "has a path"},
		{in: "https://10.0.0.5?x=1", wantErr: "has a path or query"},
		{in: "https://10.0.0.5:0", wantErr: "must be 1-65535"},
		{in: "https://10.0.0.5:99999", wantErr: "must be 1-65535"},
		{in: "https://admin:hunter22@10.0.0.5", wantErr: "carries credentials"},
		// Issue 23: read as host "fd00:" port 7 before.
		{in: "ipmi://fd00::7", wantErr: `address "ipmi://fd00::7": an IPv6 address needs brackets: ipmi://[fd00::7] (with a port: ipmi://[fd00::7]:623)`},
		{in: "https://fe80::1:8443", wantErr: "an IPv6 address needs brackets: https://[fe80::1:8443]"},
		{in: "https://[fe80::1]:8443", want: Endpoint{Redfish, "https", "fe80::1", 8443}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAddress(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseAddress(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalidTarget) {
					t.Errorf("error %v does not wrap ErrInvalidTarget", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAddress(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseAddress(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseAddressNeverEchoesPassword(t *testing.T) {
	for _, in := range []string{"https://admin:hunter22@10.0.0.5", "https://admin:hunter22@", "ipmi://u:hunter22@h:1/x",
		// url.Parse takes these for host and path: user info all the same.
		"https://admin:12/hunter22@host", "https://admin:?hunter22@host", "https://admin:#hunter22@host", "ftp://u:12/hunter22@h",
		// No "://" at all.
		"admin:hunter22@10.0.0.5", "//admin:hunter22@host", "https:/admin:hunter22@host"} {
		_, err := ParseAddress(in)
		if err == nil || strings.Contains(err.Error(), "hunter22") {
			t.Errorf("ParseAddress(%q) error = %v; want an error without the password", in, err)
		}
	}
}

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"https://h:1", "ipmi://h", "http://[::1]:80/", "https://u:p@h", "%", "https://h:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ep, err := ParseAddress(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidTarget) {
				t.Fatalf("error %v does not wrap ErrInvalidTarget", err)
			}
			return
		}
		if ep.Port < 1 || ep.Port > 65535 || ep.Host == "" {
			t.Fatalf("ParseAddress(%q) = %+v: accepted an endpoint without host or valid port", s, ep)
		}
		if ep.Protocol != Redfish && ep.Protocol != IPMI {
			t.Fatalf("ParseAddress(%q) = %+v: unknown protocol", s, ep)
		}
	})
}

func TestSecretNeverPrints(t *testing.T) {
	creds := Credentials{Username: "admin", Password: "hunter22"}
	outputs := []string{
		fmt.Sprint(creds.Password),
		fmt.Sprintf("%v %+v %#v %s %q %x", creds, creds, creds, creds.Password, creds.Password, creds.Password),
	}
	b, err := json.Marshal(creds)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, string(b))
	for _, out := range outputs {
		if strings.Contains(out, "hunter22") {
			t.Errorf("secret leaked: %s", out)
		}
	}
	if creds.Password.Reveal() != "hunter22" {
		t.Error("Reveal lost the value")
	}
}

func TestTargetValidate(t *testing.T) {
	redfish := Endpoint{Redfish, "https", "h", 443}
	plain := Endpoint{Redfish, "http", "h", 80}
	ipmi := Endpoint{IPMI, "ipmi", "h", 623}
	creds := Credentials{"admin", "secret"}
	tests := []struct {
		name    string
		target  Target
		wantErr string
	}{
		{"valid redfish", Target{Address: redfish, Credentials: creds}, ""},
		{"valid ipmi", Target{Address: ipmi, Credentials: creds, IPMICipherSuite: 3}, ""},
		{"no address", Target{Credentials: creds}, "address is empty"},
		{"no username", Target{Address: redfish, Credentials: Credentials{Password: "x"}}, "username is empty"},
		{"no password", Target{Address: redfish, Credentials: Credentials{Username: "a"}}, "password is empty"},
		{"bad auth", Target{Address: redfish, Credentials: creds, Auth: "digest"}, `auth "digest"`},
		{"negative timeout", Target{Address: redfish, Credentials: creds, Timeout: -1}, "must not be negative"},
		{"bad cipher", Target{Address: ipmi, Credentials: creds, IPMICipherSuite: 99}, "cipher suite 99"},
		{"ipmi system", Target{Address: ipmi, Credentials: creds, System: "1"}, "IPMI has no system selection"},
		{"tls on http", Target{Address: plain, Credentials: creds, InsecureSkipVerify: true}, "plain http"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.target.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalidTarget) {
				t.Fatalf("Validate() = %v, want ErrInvalidTarget containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	got := Target{}.WithDefaults()
	if got.Timeout != DefaultTimeout || got.Auth != AuthBasic || got.IPMICipherSuite != DefaultIPMICipherSuite {
		t.Errorf("WithDefaults() = %+v", got)
	}
}
