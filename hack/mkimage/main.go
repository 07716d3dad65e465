// Command mkimage is `make image`: it writes bmcfence's container image as an
// OCI image layout archive (oci-archive) from the static binaries make build
// made, with go-containerregistry and no Docker engine.
//
// The image has one layer on an empty base: fence-agent, kubectl-fence, bmcfence-cli and
// bmc-watchdog (the optional node-side watchdog petter, deploy/overlays/watchdog) in
// /usr/local/bin, /etc/passwd and /etc/group naming the nonroot user 65532,
// the CA bundle the agent verifies BMCs with when no caConfigMap is given,
// and a CycloneDX SBOM made from the binaries' own module lists. There is no
// shell and no package manager. It runs as 65532:65532.
//
// Same inputs, same digest: every timestamp is --created (make image passes
// the commit's time), files are in a fixed order with fixed owners, and the
// layer is compressed by the same code every time.
//
// Load it with `podman load -i`, `skopeo copy oci-archive:FILE …` (into
// Docker: `docker-daemon:REPO:TAG`), `ctr images import` or `kind load
// image-archive`.
//
// This is its own Go module so that go-containerregistry and its
// dependencies never enter the agent's module graph (or its SBOM).
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: distroless's "nonroot", the UID the manifests and the
// chart run as.
const (
	uid      = 65532
	userName = "nonroot"
)

// binaries go in /usr/local/bin; fence-agent is the entrypoint.
// kubectl-fence is the BMC-only front (make builds it with -tags bmcfast);
// it hands every other command to bmcfence-cli beside it.
var binaries = []string{"fence-agent", "kubectl-fence", "bmcfence-cli", "bmc-watchdog"}

const sbomPath = "usr/share/bmcfence/sbom.cdx.json"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	bin, out, sbomOut, caBundle string
	repo, version, revision     string
	source                      string
	created                     time.Time
}

func run(args []string) error {
	var o options
	var created string
	fl := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fl.StringVar(&o.bin, "bin", "bin", "directory holding the static binaries (make build)")
	fl.StringVar(&o.out, "out", "bin/bmcfence-image.tar", "OCI image layout archive to write")
	fl.StringVar(&o.sbomOut, "sbom", "", "also write the CycloneDX SBOM here (default: OUT with .cdx.json)")
	fl.StringVar(&o.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle installed as /etc/ssl/certs/ca-certificates.crt (empty: none)")
	fl.StringVar(&o.repo, "repo", "ghcr.io/bmcfence/bmcfence", "image repository, for the ref.name annotation")
	fl.StringVar(&o.version, "version", "dev", "version: image tag and org.opencontainers.image.version")
	fl.StringVar(&o.revision, "revision", "unknown", "source revision (git commit)")
	fl.StringVar(&o.source, "source", "https://github.com/bmcfence/bmcfence", "org.opencontainers.image.source")
	fl.StringVar(&created, "created", "", "creation time, RFC 3339 (default: $SOURCE_DATE_EPOCH, else 1970-01-01)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	var err error
	if o.created, err = createdTime(created); err != nil {
		return err
	}
	if o.sbomOut == "" {
		o.sbomOut = strings.TrimSuffix(o.out, ".tar") + ".cdx.json"
	}
	digest, err := build(o)
	if err != nil {
		return err
	}
	fmt.Printf("mkimage: %s:%s %s -> %s (SBOM %s)\n", o.repo, o.version, digest, o.out, o.sbomOut)
	return nil
}

func createdTime(flagValue string) (time.Time, error) {
	if flagValue != "" {
		t, err := time.Parse(time.RFC3339, flagValue)
		if err != nil {
			return time.Time{}, fmt.Errorf("--created %q: want RFC 3339, e.g. 2026-01-02T15:04:05Z", flagValue)
		}
		return t.UTC(), nil
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	return time.Unix(0, 0).UTC(), nil
}

// file is one entry of the layer.
type file struct {
	name string // without a leading slash
	mode int64
	body []byte // nil for a directory
}

func build(o options) (v1.Hash, error) {
	var files []file
	var infos []*buildinfo.BuildInfo
	arch := ""
	for _, b := range binaries {
		path := filepath.Join(o.bin, b)
		body, err := os.ReadFile(path)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%w (run make build first)", err)
		}
		if err := static(path); err != nil {
			return v1.Hash{}, err
		}
		bi, err := buildinfo.ReadFile(path)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s: no Go build information: %w", path, err)
		}
		for _, s := range bi.Settings {
			if s.Key == "GOARCH" {
				if arch != "" && arch != s.Value {
					return v1.Hash{}, fmt.Errorf("%s is %s, the others %s", path, s.Value, arch)
				}
				arch = s.Value
			}
		}
		infos = append(infos, bi)
		files = append(files, file{name: "usr/local/bin/" + b, mode: 0o755, body: body})
	}
	if arch == "" {
		return v1.Hash{}, errors.New("the binaries do not say their GOARCH")
	}
	files = append(files,
		file{name: "etc/passwd", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", userName, uid, uid, userName, userName)},
		file{name: "etc/group", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", userName, uid)},
		file{name: "home/" + userName, mode: 0o700},
		file{name: "tmp", mode: 0o1777},
	)
	if o.caBundle != "" {
		pem, err := os.ReadFile(o.caBundle)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("--ca-bundle: %w", err)
		}
		files = append(files, file{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, body: pem})
	}
	sbom, err := cycloneDX(o, infos, files)
	if err != nil {
		return v1.Hash{}, err
	}
	files = append(files, file{name: sbomPath, mode: 0o644, body: sbom})
	if err := os.WriteFile(o.sbomOut, sbom, 0o644); err != nil {
		return v1.Hash{}, err
	}

	layerTar, err := tarOf(files, o.created)
	if err != nil {
		return v1.Hash{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return v1.Hash{}, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: o.created}, CreatedBy: "hack/mkimage: " + strings.Join(binaries, ", ") + ", /etc/passwd, CA bundle, SBOM",
	}})
	if err != nil {
		return v1.Hash{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = arch, "linux"
	cf.Created = v1.Time{Time: o.created}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint: []string{"/usr/local/bin/fence-agent"},
		Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "HOME=/home/" + userName},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":       "bmcfence",
			"org.opencontainers.image.description": "Kubernetes fencing agent: confirms through a node's BMC that a dead node is off, then applies the out-of-service taint",
			"org.opencontainers.image.source":      o.source,
			"org.opencontainers.image.version":     o.version,
			"org.opencontainers.image.revision":    o.revision,
			"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
			"org.opencontainers.image.licenses":    "Apache-2.0",
		},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}

	dir, err := os.MkdirTemp("", "mkimage-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.version,
		"io.containerd.image.name":          o.repo + ":" + o.version,
	})); err != nil {
		return v1.Hash{}, err
	}
	return digest, archive(dir, o.out)
}

// static refuses a dynamically linked binary: the image has no libc.
func static(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: not an ELF binary: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; build it with CGO_ENABLED=0 (make build does)", path)
		}
	}
	return nil
}

// tarOf writes the layer: parent directories first, everything in name
// order, owned by root, stamped with t.
func tarOf(files []file, t time.Time) ([]byte, error) {
	entries := map[string]file{}
	for _, f := range files {
		entries[f.name] = f
		for d := filepath.Dir(f.name); d != "."; d = filepath.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = file{name: d, mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		f := entries[n]
		h := &tar.Header{Name: n, Mode: f.mode, ModTime: t, Format: tar.FormatPAX, Uid: 0, Gid: 0}
		if f.body == nil {
			h.Typeflag, h.Name = tar.TypeDir, n+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		// The nonroot user's home is its own.
		if n == "home/"+userName {
			h.Uid, h.Gid = uid, uid
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// archive tars the OCI layout directory into out, in a fixed order with
// fixed metadata, so the archive's bytes depend only on the image.
func archive(dir, out string) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		names = append(names, rel)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, n := range names {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(n), ModTime: time.Unix(0, 0), Mode: 0o644, Format: tar.FormatPAX}
		if st.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		body, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		h.Typeflag, h.Size = tar.TypeReg, int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// cycloneDX is the image's CycloneDX SBOM (cyclonedx-go, spec 1.6): the
// image; each binary, with its SHA-256; bmcfence's own module (the
// binaries' main module); every Go module linked into a binary (from its
// build information, so exactly what was compiled in, at the versions and
// checksums go.sum pinned); the Go standard library; the CA bundle. The
// dependency graph says which binary links which module: the image
// depends on its binaries and the CA bundle, each binary on bmcfence's
// module, the standard library and the modules its own build information
// lists. The serial number is a name-based UUID of the image's content,
// so the same image has the same SBOM.
func cycloneDX(o options, infos []*buildinfo.BuildInfo, files []file) ([]byte, error) {
	purl := func(path, version string) string { return "pkg:golang/" + path + "@" + version }
	comps := map[string]cdx.Component{}
	var graph []cdx.Dependency
	imageRef := o.repo + ":" + o.version
	var imageDeps []string
	content := sha256.New()
	goVersion := ""
	for i, bi := range infos {
		name := binaries[i]
		body := fileBody(files, "usr/local/bin/"+name)
		content.Write(body)
		binRef := "file:/usr/local/bin/" + name
		comps[binRef] = cdx.Component{
			Type: cdx.ComponentTypeApplication, BOMRef: binRef, Name: name, Version: o.version,
			Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sha256Hex(body)}},
			Properties: &[]cdx.Property{{Name: "bmcfence:path", Value: "/usr/local/bin/" + name}, {Name: "go:package", Value: bi.Path}},
		}
		imageDeps = append(imageDeps, binRef)
		goVersion = bi.GoVersion
		mainVersion := bi.Main.Version
		if mainVersion == "" || mainVersion == "(devel)" {
			mainVersion = o.version // built from a checkout without VCS stamping
		}
		mainRef := purl(bi.Main.Path, mainVersion)
		comps[mainRef] = cdx.Component{Type: cdx.ComponentTypeApplication, BOMRef: mainRef, Name: bi.Main.Path, Version: mainVersion, PackageURL: mainRef,
			Properties: &[]cdx.Property{{Name: "org.opencontainers.image.revision", Value: o.revision}}}
		binDeps := []string{mainRef, purl("stdlib", strings.TrimPrefix(bi.GoVersion, "go"))}
		for _, m := range modules(bi) {
			ref := purl(m.Path, m.Version)
			c := cdx.Component{Type: cdx.ComponentTypeLibrary, BOMRef: ref, Name: m.Path, Version: m.Version, PackageURL: ref}
			if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
				c.Properties = &[]cdx.Property{{Name: "go:module:h1", Value: h}}
			}
			comps[ref] = c
			binDeps = append(binDeps, ref)
		}
		sort.Strings(binDeps[2:])
		graph = append(graph, cdx.Dependency{Ref: binRef, Dependencies: &binDeps})
	}
	if goVersion != "" {
		v := strings.TrimPrefix(goVersion, "go")
		comps[purl("stdlib", v)] = cdx.Component{Type: cdx.ComponentTypeLibrary, BOMRef: purl("stdlib", v), Name: "stdlib", Version: v, PackageURL: purl("stdlib", v)}
	}
	for _, f := range files {
		if f.name == "etc/ssl/certs/ca-certificates.crt" {
			ref := "file:/" + f.name
			comps[ref] = cdx.Component{Type: cdx.ComponentTypeData, BOMRef: ref, Name: "/" + f.name,
				Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sha256Hex(f.body)}}}
			imageDeps = append(imageDeps, ref)
			content.Write(f.body)
		}
	}
	graph = append([]cdx.Dependency{{Ref: imageRef, Dependencies: &imageDeps}}, graph...)
	var list []cdx.Component
	for _, ref := range sortedKeys(comps) {
		list = append(list, comps[ref])
	}

	bom := cdx.NewBOM()
	bom.SerialNumber = "urn:uuid:" + uuidV5(uuidNamespaceURL, fmt.Sprintf("%s@%s#%x", o.repo, o.version, content.Sum(nil)))
	bom.Metadata = &cdx.Metadata{
		Timestamp: o.created.Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: "bmcfence hack/mkimage",
		}, {
			Type: cdx.ComponentTypeLibrary, Name: "github.com/CycloneDX/cyclonedx-go", Version: cyclonedxVersion(),
		}}},
		Component: &cdx.Component{
			Type: cdx.ComponentTypeContainer, BOMRef: imageRef, Name: o.repo, Version: o.version,
			Properties: &[]cdx.Property{{Name: "org.opencontainers.image.revision", Value: o.revision}},
		},
	}
	bom.Components = &list
	bom.Dependencies = &graph
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, fmt.Errorf("SBOM: %w", err)
	}
	return buf.Bytes(), nil
}

// cyclonedxVersion is the cyclonedx-go module mkimage was built with.
func cyclonedxVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/CycloneDX/cyclonedx-go" {
				return m.Version
			}
		}
	}
	return ""
}

func fileBody(files []file, name string) []byte {
	for _, f := range files {
		if f.name == name {
			return f.body
		}
	}
	return nil
}

// modules lists what a binary links: its dependencies, each as replaced.
func modules(bi *buildinfo.BuildInfo) []*debug.Module {
	var out []*debug.Module
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		out = append(out, m)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// uuidNamespaceURL is RFC 4122's name space for URLs
// (6ba7b811-9dad-11d1-80b4-00c04fd430c8).
var uuidNamespaceURL = [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// uuidV5 is RFC 4122's name-based UUID (version 5, SHA-1): the same name
// gives the same UUID, as reproducibility wants.
func uuidV5(ns [16]byte, name string) string {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	b := h.Sum(nil)[:16]
	b[6] = (b[6] & 0x0f) | 0x50
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
