package kubelet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// The stand-in has no container runtime and pulls no image: it maps the
// images it knows to programs on the node, and fails every other image with
// a clear reason. A container's processes see the node's filesystem; what
// an image would add is an argv prefix for its own paths (Files) and a
// directory of its commands put first on PATH (Bin).

// Image is what the stand-in runs for one image reference.
type Image struct {
	// Name says what the image became, for statuses and logs.
	Name string
	// Entrypoint and Cmd are the image's ENTRYPOINT and CMD.
	Entrypoint, Cmd []string
	// Files maps paths inside the image that commands name (argv[0]) to the
	// argv prefix that runs them on the node; a prefix of one program is
	// also in the pod's root at that path, for scripts that name it.
	Files map[string][]string
	// Bin is put first on the container's PATH ("" for none).
	Bin string
	// Root holds the image's other files, by their path in the image: the
	// pod's root has them there (a directory the image has, created
	// empty, for "").
	Root map[string]string
	// Builtin marks the testbed's own test server, which the stand-in
	// starts with the pod's name and containerPorts and waits for.
	Builtin bool
}

// ErrImageNotMapped is the reason an image cannot run on the testbed.
var ErrImageNotMapped = errors.New("the testbed maps no program to this image")

// Images are the programs on the node that images map to.
type Images struct {
	// Self is the testbed binary: its `serve` subcommand is the testbed's
	// own test server (images testbed/...), its `pause` the pause image.
	Self string
	// Agnhost is the upstream agnhost binary (testbed/tools/build.sh
	// agnhost), for the e2e-test-images agnhost image; "" if not built.
	// The image's files (the TLS pair of porter and netexec, the upload
	// directory) are in root/ beside its bin/ directory.
	Agnhost string
	// Busybox is Debian's busybox, for the busybox images; "" if absent.
	Busybox string
	// CoreDNS is CoreDNS (testbed/tools/build.sh coredns), for the coredns
	// image; "" if not built.
	CoreDNS string
	// Programs are other upstream test images that are one program each
	// (regression-issue-74839), by the image's last path element.
	Programs map[string]string
	// BinDir holds one directory of commands per image that has some
	// (made by Prepare).
	BinDir string
}

// repository returns the last path element of an image reference, without
// its tag or digest: "registry.k8s.io/e2e-test-images/agnhost:2.53" gives
// "agnhost", and the first element, "registry.k8s.io".
func repository(ref string) (first, last string) {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	first, _, _ = strings.Cut(ref, "/")
	return first, ref[strings.LastIndexByte(ref, '/')+1:]
}

// Resolve returns the program for an image reference, or an error that
// wraps ErrImageNotMapped and says what the testbed can run.
func (m Images) Resolve(ref string) (Image, error) {
	first, last := repository(ref)
	switch {
	case first == "testbed":
		return Image{Name: "testbed workload", Builtin: true, Entrypoint: []string{m.Self, "serve"}}, nil
	case last == "agnhost":
		if m.Agnhost == "" {
			return Image{}, fmt.Errorf("image %q: %w: agnhost is not built (testbed/tools/build.sh agnhost, part of `make testbed-deps`)", ref, ErrImageNotMapped)
		}
		img := Image{
			Name:       "agnhost",
			Entrypoint: []string{"/agnhost"},
			Cmd:        []string{"pause"},
			Files:      map[string][]string{"/agnhost": {m.Agnhost}, "/agnhost-2": {m.Agnhost}},
			Bin:        filepath.Join(m.BinDir, "agnhost"),
			Root:       map[string]string{"/uploads": ""},
		}
		if m.CoreDNS != "" {
			// The image carries a CoreDNS too, which DNS tests run.
			img.Files["/coredns"] = []string{m.CoreDNS}
		}
		// porter's and netexec's TLS pair, beside the program.
		if dir := agnhostRoot(m.Agnhost); dir != "" {
			for _, f := range []string{"localhost.crt", "localhost.key"} {
				img.Root["/"+f] = filepath.Join(dir, f)
			}
		}
		return img, nil
	case last == "pause":
		return Image{Name: "pause", Entrypoint: []string{"/pause"}, Files: map[string][]string{"/pause": {m.Self, "pause"}}}, nil
	case last == "coredns":
		if m.CoreDNS == "" {
			return Image{}, fmt.Errorf("image %q: %w: CoreDNS is not built (testbed/tools/build.sh coredns, part of `make testbed-deps`)", ref, ErrImageNotMapped)
		}
		return Image{Name: "coredns", Entrypoint: []string{"/coredns"}, Files: map[string][]string{"/coredns": {m.CoreDNS}}}, nil
	case last == "glibc-dns-testing" || last == "jessie-dnsutils":
		// Debian with dnsutils, which is what the node is.
		return Image{Name: "debian dnsutils", Cmd: []string{"sh"}}, nil
	case last == "busybox":
		if m.Busybox == "" {
			return Image{}, fmt.Errorf("image %q: %w: busybox is not installed on the node", ref, ErrImageNotMapped)
		}
		return Image{
			Name:  "busybox",
			Cmd:   []string{"sh"},
			Files: map[string][]string{"/bin/busybox": {m.Busybox}},
			Bin:   filepath.Join(m.BinDir, "busybox"),
		}, nil
	}
	if p, ok := m.Programs[last]; ok {
		return Image{Name: last, Entrypoint: []string{"/" + last}, Files: map[string][]string{"/" + last: {p}}}, nil
	}
	return Image{}, fmt.Errorf("image %q: %w (it runs testbed/*, agnhost, pause, busybox, coredns, glibc-dns-testing and regression-issue-74839 images)", ref, ErrImageNotMapped)
}

// agnhostRoot is the directory of the agnhost image's files, "" if there
// is none.
func agnhostRoot(bin string) string {
	dir := filepath.Join(filepath.Dir(filepath.Dir(bin)), "root")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return ""
	}
	return dir
}

// Prepare makes the images' command directories: agnhost's holds agnhost,
// busybox's one link per applet. The kubelets of one testbed share them:
// it runs once, before they start.
func (m Images) Prepare() error {
	if m.BinDir == "" {
		return nil
	}
	link := func(dir, name, target string) error {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		p := filepath.Join(dir, name)
		if t, err := os.Readlink(p); err == nil && t == target {
			return nil
		}
		_ = os.Remove(p)
		return os.Symlink(target, p)
	}
	if m.Agnhost != "" {
		if err := link(filepath.Join(m.BinDir, "agnhost"), "agnhost", m.Agnhost); err != nil {
			return fmt.Errorf("images: agnhost: %w", err)
		}
	}
	if m.Busybox != "" {
		out, err := exec.Command(m.Busybox, "--list").Output()
		if err != nil {
			return fmt.Errorf("images: busybox --list: %w", err)
		}
		for _, applet := range strings.Fields(string(out)) {
			if err := link(filepath.Join(m.BinDir, "busybox"), applet, m.Busybox); err != nil {
				return fmt.Errorf("images: busybox %s: %w", applet, err)
			}
		}
	}
	return nil
}

// defaultPath is the PATH of a container whose image sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// argv returns the command a container runs, as a kubelet computes it
// (command replaces the entrypoint, args the image's CMD; $(VAR) expanded
// from env), with the image's own paths mapped to the node's.
func (img Image) argv(command, args []string, env map[string]string) ([]string, error) {
	var out []string
	switch {
	case len(command) > 0:
		out = append(expandAll(command, env), expandAll(args, env)...)
	case len(args) > 0:
		out = append(append([]string(nil), img.Entrypoint...), expandAll(args, env)...)
	default:
		out = append(append([]string(nil), img.Entrypoint...), img.Cmd...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no command: the image %s has no entrypoint and the container sets none", img.Name)
	}
	return img.mapCommand(out), nil
}

// workingDir is a container's working directory: its own, or the image's
// (/ for every image the stand-in knows).
func (img Image) workingDir(spec string) string {
	if spec != "" {
		return spec
	}
	return "/"
}

// rootFiles are what the image puts in a pod's root, by path: its
// programs (a file whose argv prefix is one program) and its other files.
func (img Image) rootFiles() map[string]string {
	out := map[string]string{}
	for p, argv := range img.Files {
		if len(argv) == 1 {
			out[p] = argv[0]
		}
	}
	for p, src := range img.Root {
		out[p] = src
	}
	return out
}

// mapCommand replaces argv[0] when it names one of the image's files.
func (img Image) mapCommand(argv []string) []string {
	if len(argv) == 0 {
		return argv
	}
	if prefix, ok := img.Files[argv[0]]; ok {
		return append(append([]string(nil), prefix...), argv[1:]...)
	}
	return argv
}

// expandAll expands $(VAR) references as a kubelet does: a defined
// variable is replaced, an undefined reference is left as written, and
// $$ escapes a dollar sign.
func expandAll(in []string, env map[string]string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s, env)
	}
	return out
}

func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// environ returns env as KEY=VALUE lines, sorted.
func environ(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
