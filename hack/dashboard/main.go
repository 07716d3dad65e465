package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// dashboardFile is where the chart reads the dashboard, from this
// directory.
var dashboardFile = filepath.Join("..", "..", "charts", "bmcfence", "files", "dashboards", "bmcfence.json")

func main() {
	out := flag.String("out", dashboardFile, "where to write the dashboard")
	flag.Parse()
	series, err := Exported()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
	b, left := Build(series.Has)
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
	fmt.Printf("dashboard: wrote %s\n", *out)
	for _, l := range left {
		fmt.Printf("dashboard: left out %s\n", l)
	}
}
