package dial

import (
	"os"
	"strings"
	"testing"
)

// The product's module requires no Go Redfish client of its own: gofish
// and bmclib serve only the mock's conformance tests, in their own modules
// (test/redfishclients), so scanners find neither, nor what they drag in.
func TestTheProductModuleRequiresNoTestOnlyClient(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range []string{"github.com/stmcginnis/gofish", "github.com/bmc-toolbox/bmclib", "github.com/VictorLowther/soap", "github.com/satori/go.uuid"} {
		if strings.Contains(string(b), mod) {
			t.Errorf("go.mod requires %s: move the tests that use it to test/redfishclients", mod)
		}
	}
}
