// Package ociimage builds nodeflow's OCI image from its binaries with Go
// tooling alone (no container engine): for each platform, one image whose
// only layer holds the static nodeflow binary at /usr/local/bin/nodeflow,
// and an index of the platforms. Nothing in it depends on the time or the
// machine it is built on (file times, the creation time and the history
// carry the given Created time; owners are root; gzip has no timestamp), so
// the same binaries give the same digests.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BinaryPath is where the image holds the nodeflow binary; it is the
// entrypoint.
const BinaryPath = "/usr/local/bin/nodeflow"

// OCI annotation and label keys the image carries.
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelSource   = "org.opencontainers.image.source"
	LabelTitle    = "org.opencontainers.image.title"
	AnnotationRef = "org.opencontainers.image.ref.name"
	// AnnotationContainerdName is the full name containerd's import gives
	// the image (`ctr images import`, `kind load image-archive`).
	AnnotationContainerdName = "io.containerd.image.name"
)

// Binary is the nodeflow binary built for one platform.
type Binary struct {
	// Platform is the binary's OS and architecture (and variant).
	Platform v1.Platform
	// Path is the binary on disk.
	Path string
}

// Options say what to build.
type Options struct {
	// Binaries are the platforms' binaries, one per platform.
	Binaries []Binary
	// Version and Revision (the commit) label the images.
	Version, Revision string
	// Source labels the images with where the source is (optional).
	Source string
	// Created is the images' creation time and their files' time: the
	// commit's time for a reproducible build.
	Created time.Time
}

// Build returns the index of one image per binary.
func Build(opts Options) (v1.ImageIndex, error) {
	if len(opts.Binaries) == 0 {
		return nil, fmt.Errorf("ociimage: no binaries")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	for _, b := range opts.Binaries {
		p := b.Platform
		if p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("ociimage: binary %s: platform %q lacks an OS or an architecture", b.Path, p.String())
		}
		if seen[p.String()] {
			return nil, fmt.Errorf("ociimage: binary %s: platform %s given twice", b.Path, p.String())
		}
		seen[p.String()] = true
		img, err := image(b, opts)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, nil
}

// image is the image of one binary.
func image(b Binary, opts Options) (v1.Image, error) {
	bin, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	tarb, err := layerTar(bin, opts.Created)
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer of %s: %w", b.Path, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarb)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer of %s: %w", b.Path, err)
	}
	created := v1.Time{Time: opts.Created.UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	// The layer's descriptor is annotated: an empty annotation map would
	// differ from the manifest's bytes, which leave it out.
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, Annotations: map[string]string{LabelTitle: BinaryPath},
		History: v1.History{Created: created, CreatedBy: "ociimage: nodeflow " + opts.Version, Comment: "the nodeflow binary"}})
	if err != nil {
		return nil, fmt.Errorf("ociimage: %s: %w", b.Path, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("ociimage: %s: %w", b.Path, err)
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = b.Platform.OS, b.Platform.Architecture, b.Platform.Variant, b.Platform.OSVersion
	cf.Config.Entrypoint = []string{BinaryPath}
	cf.Config.Cmd = nil
	cf.Config.Env = []string{"PATH=/usr/local/bin"}
	cf.Config.Labels = map[string]string{LabelTitle: "nodeflow", LabelVersion: opts.Version, LabelRevision: opts.Revision}
	if opts.Source != "" {
		cf.Config.Labels[LabelSource] = opts.Source
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("ociimage: %s: %w", b.Path, err)
	}
	return img, nil
}

// layerTar is the layer's tar: the directories down to the binary and the
// binary, owned by root, at time t.
func layerTar(bin []byte, t time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	t = t.UTC()
	dir := path.Dir(BinaryPath)[1:] // usr/local/bin
	var dirs []string
	for d := dir; d != "."; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: t, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: BinaryPath[1:], Mode: 0o755, Size: int64(len(bin)), ModTime: t, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes idx as an OCI image layout in dir (created, or
// replaced), its index named ref (org.opencontainers.image.ref.name), the
// form `podman load` and skopeo's oci: transport read, and by ref's full
// name (io.containerd.image.name, FullName), the name containerd's import
// takes.
func WriteLayout(dir string, idx v1.ImageIndex, ref string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("ociimage: layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{AnnotationRef: ref, AnnotationContainerdName: FullName(ref)})); err != nil {
		return fmt.Errorf("ociimage: layout %s: %w", dir, err)
	}
	return nil
}

// FullName is ref with the registry and repository path a container
// runtime fills in for a short name: "nodeflow:v1" is
// "docker.io/library/nodeflow:v1", "me/nodeflow:v1" is
// "docker.io/me/nodeflow:v1"; a name whose first part is a host
// (with a dot or a port, or localhost) is already full.
func FullName(ref string) string {
	first, rest, found := strings.Cut(ref, "/")
	switch {
	case !found:
		return "docker.io/library/" + ref
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return ref
	default:
		return "docker.io/" + first + "/" + rest
	}
}

// WriteArchive writes the OCI layout in dir as a tar file (an OCI archive,
// `podman load -i FILE`): its files in name order, owned by root, at time
// t.
func WriteArchive(file, dir string, t time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ociimage: archive %s: %w", dir, err)
	}
	sort.Strings(names)
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	tw := tar.NewWriter(f)
	for _, p := range names {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			f.Close()
			return err
		}
		fi, err := os.Stat(p)
		if err != nil {
			f.Close()
			return fmt.Errorf("ociimage: %w", err)
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: t.UTC(), Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: fi.Size()}
		if fi.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			f.Close()
			return fmt.Errorf("ociimage: archive %s: %w", file, err)
		}
		if !fi.IsDir() {
			b, err := os.ReadFile(p)
			if err == nil {
				_, err = tw.Write(b)
			}
			if err != nil {
				f.Close()
				return fmt.Errorf("ociimage: archive %s: %w", file, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("ociimage: archive %s: %w", file, err)
	}
	return f.Close()
}
