package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdRef finds a Markdown file named in text, not as part of a URL or a
// longer path: "docs/design.md", "SECURITY.md".
var mdRef = regexp.MustCompile(`(?:^|[^\w/.-])((?:docs/)?[A-Za-z][\w-]*\.md)\b`)

// The repository stands on its own: every Markdown file its code, scripts,
// manifests and docs name exists in it (beside the file, at the root or in
// docs/), and nothing points at the design notes that lived outside it.
func TestDocumentsNamedExist(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		switch filepath.Ext(f) {
		case ".go", ".md", ".sh", ".yaml", ".yml", ".tpl", ".txt", "":
		default:
			continue
		}
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			continue // deleted in the work tree
		}
		text := string(b)
		// Spelled in two halves, so this file does not name it.
		if outside := "../" + "shared"; strings.Contains(text, outside) {
			t.Errorf("%s points outside the repository (%s)", f, outside)
		}
		for _, m := range mdRef.FindAllStringSubmatch(text, -1) {
			name := m[1]
			found := false
			for _, p := range []string{filepath.Join(filepath.Dir(f), name), name, filepath.Join("docs", name)} {
				if _, err := os.Stat(filepath.Join("..", p)); err == nil {
					found = true
				}
			}
			if !found {
				t.Errorf("%s names %s, which is not in the repository", f, name)
			}
		}
	}
}
