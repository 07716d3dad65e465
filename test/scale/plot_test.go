//go:build scale

package scale

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestPlot writes the growth plot (growth.svg) from the figures of the runs
// under -plot (DIR/*/figures.json) and prints the README's growth table:
//
//	go test -tags scale -run TestPlot ./test/scale -args -plot=docs/scale
func TestPlot(t *testing.T) {
	if *flagPlot == "" {
		t.Skip("no -plot directory")
	}
	dir := underRepo(t, *flagPlot)
	figs, err := loadFigures(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) == 0 {
		t.Fatalf("no %s/*/figures.json", dir)
	}
	svg := filepath.Join(dir, "growth.svg")
	if err := os.WriteFile(svg, []byte(plot(figs)), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("scale: plot: %s\n\n%s", svg, table(figs))
}
