package ociimage

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var created = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func opts(amd64, arm64 string) Options {
	return Options{Version: "v0.1.0", Revision: "abc123", Created: created, Binaries: []Binary{
		{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Path: amd64},
		{Platform: v1.Platform{OS: "linux", Architecture: "arm64"}, Path: arm64},
	}}
}

func digest(t *testing.T, o Options) v1.Hash {
	t.Helper()
	idx, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Fatalf("the index does not validate: %v", err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The same binaries give the same digest, whenever and wherever they are
// built (file times on disk do not count); other binaries, another time or
// another version give another.
func TestReproducible(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a", "amd64 binary")
	b := writeFile(t, dir, "b", "arm64 binary")
	first := digest(t, opts(a, b))
	if err := os.Chtimes(a, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if again := digest(t, opts(a, b)); again != first {
		t.Errorf("digest %s, then %s for the same binaries", first, again)
	}
	other := writeFile(t, dir, "c", "another amd64 binary")
	if d := digest(t, opts(other, b)); d == first {
		t.Error("another binary gave the same digest")
	}
	o := opts(a, b)
	o.Created = created.Add(time.Second)
	if d := digest(t, o); d == first {
		t.Error("another creation time gave the same digest")
	}
	o = opts(a, b)
	o.Version = "v0.2.0"
	if d := digest(t, o); d == first {
		t.Error("another version gave the same digest")
	}
}

// Each platform's image runs the binary as its entrypoint, from its one
// layer, owned by root and executable, with the labels and times asked.
func TestImageContent(t *testing.T) {
	dir := t.TempDir()
	idx, err := Build(opts(writeFile(t, dir, "a", "AMD"), writeFile(t, dir, "b", "ARM")))
	if err != nil {
		t.Fatal(err)
	}
	man, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(man.Manifests) != 2 {
		t.Fatalf("%d manifests, want 2", len(man.Manifests))
	}
	for i, want := range []string{"AMD", "ARM"} {
		desc := man.Manifests[i]
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != desc.Platform.OS || cf.Architecture != desc.Platform.Architecture {
			t.Errorf("image %d: config %s/%s, index %s", i, cf.OS, cf.Architecture, desc.Platform)
		}
		if strings.Join(cf.Config.Entrypoint, " ") != BinaryPath || !cf.Created.Time.Equal(created) {
			t.Errorf("image %d: entrypoint %q, created %s", i, cf.Config.Entrypoint, cf.Created.Time)
		}
		if cf.Config.Labels[LabelVersion] != "v0.1.0" || cf.Config.Labels[LabelRevision] != "abc123" {
			t.Errorf("image %d: labels %v", i, cf.Config.Labels)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("image %d: %d layers, %v", i, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		var names []string
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
			if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(created) {
				t.Errorf("image %d: %s owned by %d:%d at %s", i, h.Name, h.Uid, h.Gid, h.ModTime)
			}
			if h.Name == BinaryPath[1:] {
				b, _ := io.ReadAll(tr)
				if string(b) != want || h.Mode != 0o755 {
					t.Errorf("image %d: binary %q mode %o, want %q 0755", i, b, h.Mode, want)
				}
			}
		}
		rc.Close()
		if got := strings.Join(names, " "); got != "usr/ usr/local/ usr/local/bin/ usr/local/bin/nodeflow" {
			t.Errorf("image %d: layer holds %s", i, got)
		}
	}
}

// The layout reads back as the same index under its name, and the archive
// holds the layout's files; both are the same bytes when written again.
func TestLayoutAndArchive(t *testing.T) {
	dir := t.TempDir()
	idx, err := Build(opts(writeFile(t, dir, "a", "AMD"), writeFile(t, dir, "b", "ARM")))
	if err != nil {
		t.Fatal(err)
	}
	lay := filepath.Join(dir, "layout")
	var archives [][]byte
	for range 2 {
		if err := WriteLayout(lay, idx, "nodeflow:v0.1.0"); err != nil {
			t.Fatal(err)
		}
		arch := filepath.Join(dir, "image.tar")
		if err := WriteArchive(arch, lay, created); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(arch)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, b)
	}
	if string(archives[0]) != string(archives[1]) {
		t.Error("the archive differs when written again")
	}
	p, err := layout.FromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	man, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if len(man.Manifests) != 1 || man.Manifests[0].Digest != want || man.Manifests[0].Annotations[AnnotationRef] != "nodeflow:v0.1.0" ||
		man.Manifests[0].Annotations[AnnotationContainerdName] != "docker.io/library/nodeflow:v0.1.0" {
		b, _ := json.Marshal(man)
		t.Errorf("layout index %s, want the image index %s named nodeflow:v0.1.0", b, want)
	}
}

// Bad options are refused with the binary named.
func TestBuildErrors(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a", "x")
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"no binaries", Options{}, "no binaries"},
		{"missing file", Options{Binaries: []Binary{{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Path: filepath.Join(dir, "none")}}}, "none"},
		{"no architecture", Options{Binaries: []Binary{{Platform: v1.Platform{OS: "linux"}, Path: a}}}, "lacks an OS or an architecture"},
		{"twice", Options{Binaries: []Binary{{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Path: a}, {Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Path: a}}}, "given twice"},
	} {
		if _, err := Build(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// The real thing: nodeflow built twice for linux/amd64 and linux/arm64 as
// `make image` builds it, into two directories, gives one image digest.
func TestReproducibleFromSource(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: cross-compiles nodeflow twice")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build nodeflow with")
	}
	var digests []v1.Hash
	for i := range 2 {
		dir := t.TempDir()
		var bins []Binary
		for _, arch := range []string{"amd64", "arm64"} {
			out := filepath.Join(dir, arch, "nodeflow")
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=test", "-o", out, "nodeflow/cmd/nodeflow")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build for %s: %v\n%s", arch, err, b)
			}
			bins = append(bins, Binary{Platform: v1.Platform{OS: "linux", Architecture: arch}, Path: out})
		}
		digests = append(digests, digest(t, Options{Version: "test", Created: created, Binaries: bins}))
		t.Logf("build %d: %s (go %s)", i, digests[i], runtime.Version())
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the same source: %s and %s", digests[0], digests[1])
	}
}

func TestFullName(t *testing.T) {
	for ref, want := range map[string]string{
		"nodeflow:v1":                 "docker.io/library/nodeflow:v1",
		"me/nodeflow:v1":              "docker.io/me/nodeflow:v1",
		"registry.example:5000/nf:v1": "registry.example:5000/nf:v1",
		"quay.io/me/nodeflow:v1":      "quay.io/me/nodeflow:v1",
		"localhost/nodeflow:v1":       "localhost/nodeflow:v1",
		"localhost:5000/nodeflow:v1":  "localhost:5000/nodeflow:v1",
	} {
		if got := FullName(ref); got != want {
			t.Errorf("FullName(%q) = %q, want %q", ref, got, want)
		}
	}
}
