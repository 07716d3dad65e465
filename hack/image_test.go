package hack

// The test of `make image` (hack/mkimage): the OCI archive's config, user,
// files and SBOM, that the binary inside runs, that the same inputs give the
// same digest, and that every binary carries the stamped version.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bmcfence/bmcfence/test/controlplane"
)

// goBuild runs go build in dir with the Makefile's flags.
func goBuild(t *testing.T, dir, out, pkg string, ldflags string, tags ...string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-tags", strings.Join(tags, ","), "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

type ociImage struct {
	archive  []byte
	digest   string
	manifest struct {
		MediaType string `json:"mediaType"`
		Config    struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"config"`
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"layers"`
	}
	config struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			User       string            `json:"User"`
			Entrypoint []string          `json:"Entrypoint"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
	}
	files map[string]*tar.Header
	data  map[string][]byte
}

// readOCI reads an OCI image layout archive with the standard library only.
func readOCI(t *testing.T, archive []byte) *ociImage {
	t.Helper()
	img := &ociImage{archive: archive, files: map[string]*tar.Header{}, data: map[string][]byte{}}
	blobs := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		blobs[h.Name] = b
	}
	if got := string(blobs["oci-layout"]); !strings.Contains(got, `"imageLayoutVersion"`) {
		t.Fatalf("oci-layout = %q", got)
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v, %s", err, blobs["index.json"])
	}
	blob := func(digest string) []byte {
		b, ok := blobs["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if !ok {
			t.Fatalf("blob %s missing", digest)
		}
		if got := fmt.Sprintf("sha256:%x", sha256.Sum256(b)); got != digest {
			t.Fatalf("blob %s has digest %s", digest, got)
		}
		return b
	}
	img.digest = index.Manifests[0].Digest
	if err := json.Unmarshal(blob(img.digest), &img.manifest); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(blob(img.manifest.Config.Digest), &img.config); err != nil {
		t.Fatal(err)
	}
	for _, l := range img.manifest.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(blob(l.Digest)))
		if err != nil {
			t.Fatal(err)
		}
		lr := tar.NewReader(zr)
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			name := "/" + strings.TrimSuffix(h.Name, "/")
			img.files[name] = h
			img.data[name], _ = io.ReadAll(lr)
		}
	}
	return img
}

func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and the image (~1 minute)")
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := builtCommands(t)
	// --version is stamped on every binary, as make build stamps it.
	for _, c := range []string{"fence-agent", "kubectl-fence", "redfish-mock", "bmc-watchdog"} {
		out, err := exec.Command(filepath.Join(bin, c), "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), c+" "+stamp+" (commit 0123abc, built 2026-01-02T03:04:05Z") {
			t.Errorf("%s --version: %v, %q", c, err, out)
		}
	}
	mkimage := filepath.Join(t.TempDir(), "mkimage")
	goBuild(t, filepath.Join(root, "hack", "mkimage"), mkimage, ".", "")

	// Twice, from the same inputs.
	var archives [2][]byte
	for i := range archives {
		out := filepath.Join(t.TempDir(), "image.tar")
		cmd := exec.Command(mkimage, "-bin", bin, "-out", out, "-version", stamp, "-revision", "0123abc", "-created", "2026-01-02T03:04:05Z")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mkimage: %v\n%s", err, b)
		}
		if archives[i], err = os.ReadFile(out); err != nil {
			t.Fatal(err)
		}
	}
	img := readOCI(t, archives[0])
	again := readOCI(t, archives[1])
	if img.digest != again.digest || !bytes.Equal(archives[0], archives[1]) {
		t.Errorf("not reproducible: digests %s and %s, archives equal: %v", img.digest, again.digest, bytes.Equal(archives[0], archives[1]))
	}
	t.Logf("image %s, archive %d bytes", img.digest, len(archives[0]))

	t.Run("config", func(t *testing.T) {
		c := img.config.Config
		if c.User != "65532:65532" {
			t.Errorf("User = %q, want 65532:65532", c.User)
		}
		if diff := cmp.Diff([]string{"/usr/local/bin/fence-agent"}, c.Entrypoint); diff != "" {
			t.Errorf("Entrypoint (-want +got):\n%s", diff)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.source":   "https://github.com/bmcfence/bmcfence",
			"org.opencontainers.image.version":  stamp,
			"org.opencontainers.image.revision": "0123abc",
			"org.opencontainers.image.licenses": "Apache-2.0",
		} {
			if got := c.Labels[k]; got != want {
				t.Errorf("label %s = %q, want %q", k, got, want)
			}
		}
		if img.config.OS != "linux" || img.config.Architecture == "" {
			t.Errorf("platform %s/%s", img.config.OS, img.config.Architecture)
		}
		if img.manifest.MediaType != "application/vnd.oci.image.manifest.v1+json" || len(img.manifest.Layers) != 1 {
			t.Errorf("manifest %+v: want one OCI layer on an empty base", img.manifest)
		}
	})

	t.Run("files", func(t *testing.T) {
		for _, f := range []string{"/usr/local/bin/fence-agent", "/usr/local/bin/kubectl-fence", "/usr/local/bin/bmcfence-cli", "/usr/local/bin/bmc-watchdog", "/etc/passwd", "/etc/group",
			"/etc/ssl/certs/ca-certificates.crt", "/usr/share/bmcfence/sbom.cdx.json", "/tmp"} {
			if img.files[f] == nil {
				t.Errorf("%s missing", f)
			}
		}
		for name, h := range img.files {
			base := path.Base(name)
			switch base {
			case "sh", "bash", "dash", "ash", "busybox", "apt", "apt-get", "dpkg":
				t.Errorf("%s in the image: it must have no shell and no package manager", name)
			}
			if strings.HasPrefix(name, "/usr/local/bin/") && (h.Uid != 0 || h.Mode&0o022 != 0) {
				t.Errorf("%s: owner %d mode %o: the user must not be able to change its binaries", name, h.Uid, h.Mode)
			}
		}
		if !strings.Contains(string(img.data["/etc/passwd"]), "nonroot:x:65532:65532:") {
			t.Errorf("/etc/passwd = %q, want the nonroot user", img.data["/etc/passwd"])
		}
	})

	t.Run("the binaries inside run", func(t *testing.T) {
		dir := t.TempDir()
		for _, c := range []string{"fence-agent", "kubectl-fence", "bmcfence-cli"} {
			p := filepath.Join(dir, c)
			if err := os.WriteFile(p, img.data["/usr/local/bin/"+c], 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(p, "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), stamp) {
				t.Errorf("%s --version from the image: %v, %q", c, err, out)
			}
		}
	})

	t.Run("SBOM", func(t *testing.T) {
		var bom struct {
			BOMFormat    string `json:"bomFormat"`
			SpecVersion  string `json:"specVersion"`
			SerialNumber string `json:"serialNumber"`
			Metadata     struct {
				Component struct {
					BOMRef string `json:"bom-ref"`
					Name   string `json:"name"`
				} `json:"component"`
			} `json:"metadata"`
			Components []struct {
				BOMRef  string `json:"bom-ref"`
				Type    string `json:"type"`
				Name    string `json:"name"`
				Version string `json:"version"`
				PURL    string `json:"purl"`
				Hashes  []struct {
					Alg     string `json:"alg"`
					Content string `json:"content"`
				} `json:"hashes"`
			} `json:"components"`
			Dependencies []struct {
				Ref       string   `json:"ref"`
				DependsOn []string `json:"dependsOn"`
			} `json:"dependencies"`
		}
		sbom := img.data["/usr/share/bmcfence/sbom.cdx.json"]
		if err := json.Unmarshal(sbom, &bom); err != nil {
			t.Fatal(err)
		}
		if bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.6" {
			t.Errorf("bomFormat %q specVersion %q", bom.BOMFormat, bom.SpecVersion)
		}
		// RFC 4122: a name-based (version 5) UUID, the same for the same image.
		if !regexp.MustCompile(`^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(bom.SerialNumber) {
			t.Errorf("serialNumber %q is not a urn:uuid: of a version 5 UUID", bom.SerialNumber)
		}
		found, byRef := map[string]string{}, map[string]string{}
		for _, c := range bom.Components {
			found[c.Name] = c.PURL
			byRef[c.BOMRef] = c.Name
			if c.Type == "application" && strings.HasPrefix(c.BOMRef, "file:/usr/local/bin/") {
				want := fmt.Sprintf("%x", sha256.Sum256(img.data[strings.TrimPrefix(c.BOMRef, "file:")]))
				if len(c.Hashes) != 1 || c.Hashes[0].Content != want {
					t.Errorf("%s: hashes %v, want the file's SHA-256 %s", c.BOMRef, c.Hashes, want)
				}
			}
		}
		// bmcfence's own module, and what go.mod pins, as linked; and no
		// image-building tool.
		if p := found["github.com/bmcfence/bmcfence"]; !strings.HasPrefix(p, "pkg:golang/github.com/bmcfence/bmcfence@") {
			t.Errorf("the SBOM does not name bmcfence's own module (purl %q)", p)
		}
		for name, purl := range map[string]string{
			"k8s.io/client-go":          "pkg:golang/k8s.io/client-go@v0.34.4",
			"github.com/bougou/go-ipmi": "pkg:golang/github.com/bougou/go-ipmi@v0.8.3",
		} {
			if found[name] != purl {
				t.Errorf("component %s: purl %q, want %q", name, found[name], purl)
			}
		}
		// No image-building tool, and no library only the tests link.
		for _, absent := range []string{"github.com/google/go-containerregistry", "github.com/bmc-toolbox/bmclib/v2", "github.com/CycloneDX/cyclonedx-go"} {
			if _, ok := found[absent]; ok {
				t.Errorf("the SBOM lists %s, which is not in the image", absent)
			}
		}
		// The graph: the image holds the four binaries; each binary links
		// bmcfence's module and what its own build information lists (the
		// BMC-only front links no client-go).
		deps := map[string][]string{}
		for _, d := range bom.Dependencies {
			for _, r := range d.DependsOn {
				deps[byRef[d.Ref]] = append(deps[byRef[d.Ref]], byRef[r])
			}
		}
		var image []string
		for _, d := range bom.Dependencies {
			if d.Ref == bom.Metadata.Component.BOMRef {
				for _, r := range d.DependsOn {
					image = append(image, byRef[r])
				}
			}
		}
		for _, b := range []string{"fence-agent", "kubectl-fence", "bmcfence-cli", "bmc-watchdog"} {
			if !slices.Contains(image, b) {
				t.Errorf("the image (%s) does not depend on %s: %v", bom.Metadata.Component.BOMRef, b, image)
			}
		}
		for bin, want := range map[string]map[string]bool{
			"fence-agent":   {"github.com/bmcfence/bmcfence": true, "k8s.io/client-go": true, "github.com/bougou/go-ipmi": true},
			"bmcfence-cli":  {"github.com/bmcfence/bmcfence": true, "k8s.io/client-go": true},
			"kubectl-fence": {"github.com/bmcfence/bmcfence": true, "github.com/bougou/go-ipmi": true, "k8s.io/client-go": false},
			"bmc-watchdog":  {"github.com/bmcfence/bmcfence": true, "k8s.io/client-go": false},
		} {
			for mod, linked := range want {
				if slices.Contains(deps[bin], mod) != linked {
					t.Errorf("%s depends on %s: %v, want %v", bin, mod, !linked, linked)
				}
			}
		}
	})
}
