package preflight

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// With ByName, the Secret and ConfigMap reads are asked for exactly the
// inventory's names, so a grant by resourceNames (the Helm chart's) passes.
func TestNamedPermissions(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want []string
	}{
		{"any name", Options{Namespace: ns, LeaseName: "l"}, []string{"get secrets in " + ns, "get configmaps in " + ns}},
		{"by name", Options{Namespace: ns, LeaseName: "l", ByName: true, SecretNames: []string{"a", "b"}, ConfigMapNames: []string{"ca"}},
			[]string{"get secrets a in " + ns, "get secrets b in " + ns, "get configmaps ca in " + ns}},
		{"no CA ConfigMap read", Options{Namespace: ns, LeaseName: "l", ByName: true, SecretNames: []string{"a"}},
			[]string{"get secrets a in " + ns}},
		{"BareMetalHosts: their Secrets in their namespace, by any name", Options{Namespace: ns, LeaseName: "l", ByName: true, ConfigMapNames: []string{"ca"}, Metal3Namespaces: []string{"metal3"}},
			[]string{"get configmaps ca in " + ns, "get secrets in metal3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range tt.o.namedPermissions() {
				if p.Resource == "secrets" || p.Resource == "configmaps" {
					got = append(got, p.describe(p.Verbs))
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
