package testbed

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Go constants must name the versions testbed/tools pins, or the
// testbed looks for the binaries in the wrong cache directory.
func TestVersionsMatchTools(t *testing.T) {
	for _, tc := range []struct{ file, module, want string }{
		{"tools/kube/go.mod", "k8s.io/kubernetes", KubernetesVersion},
		{"tools/etcd/go.mod", "go.etcd.io/etcd/server/v3", EtcdVersion},
	} {
		b, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(tc.module) + `\s+(v\S+)`)
		m := re.FindSubmatch(b)
		if m == nil || string(m[1]) != tc.want {
			t.Errorf("%s pins %s at %q; the testbed expects %s", tc.file, tc.module, m, tc.want)
		}
	}
	// Every staging module k8s.io/kubernetes requires at v0.0.0 must be
	// replaced by the published version of the same release.
	b, _ := os.ReadFile("tools/kube/go.mod")
	staging := regexp.MustCompile(`(?m)^\s+(k8s\.io/\S+) => (k8s\.io/\S+) (v\S+)$`).FindAllSubmatch(b, -1)
	if len(staging) < 30 {
		t.Errorf("only %d staging replace lines", len(staging))
	}
	want := "v0" + strings.TrimPrefix(KubernetesVersion, "v1")
	for _, m := range staging {
		if string(m[1]) != string(m[2]) || string(m[3]) != want {
			t.Errorf("replace %s => %s %s, want %s", m[1], m[2], m[3], want)
		}
	}
}

func TestDefaultBinDir(t *testing.T) {
	t.Setenv("NODEFLOW_TESTBED_CACHE", "/x")
	if got := DefaultBinDir(); got != "/x/kube-"+KubernetesVersion+"-etcd-"+EtcdVersion+"/bin" {
		t.Errorf("DefaultBinDir = %s", got)
	}
	t.Setenv("NODEFLOW_TESTBED_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/c")
	if got := DefaultBinDir(); !strings.HasPrefix(got, "/c/nodeflow/testbed/") {
		t.Errorf("DefaultBinDir = %s", got)
	}
	if err := CheckBinaries(t.TempDir()); err == nil || !strings.Contains(err.Error(), "make testbed-deps") {
		t.Errorf("CheckBinaries of an empty dir: %v", err)
	}
}

func TestStateAndStatus(t *testing.T) {
	root := t.TempDir()
	if _, err := Resolve(root, ""); err == nil || !strings.Contains(err.Error(), "no testbed is up") {
		t.Errorf("resolve with none: %v", err)
	}
	for _, name := range []string{"a", "b"} {
		dir := filepath.Join(root, name)
		os.MkdirAll(filepath.Join(dir, "logs"), 0o755)
		st := &State{Name: name, Dir: dir, Members: []Member{
			{Name: "node1", Kind: "k8s-node", Netns: "nf-" + name + "-node1", Addresses: []string{"172.30.0.11", "fd00::11"}, OVSRundir: "/r/n1", Dir: filepath.Join(dir, "nodes", "node1")},
			{Name: "ext1", Kind: "host", Netns: "nf-" + name + "-ext1"},
		}}
		if err := st.write(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Resolve(root, ""); err == nil || !strings.Contains(err.Error(), "a, b") {
		t.Errorf("resolve with two: %v", err)
	}
	dir, err := Resolve(root, "b")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	WriteStatus(&out, st)
	want := "node1 k8s-node nf-b-node1 172.30.0.11,fd00::11 /r/n1\next1 host nf-b-ext1 - -\n"
	if out.String() != want {
		t.Errorf("status:\n%s\nwant:\n%s", out.String(), want)
	}
	tgt, err := ResolveTarget(st, "node1")
	if err != nil || tgt.Netns != "nf-b-node1" || !strings.Contains(strings.Join(tgt.Env, " "), "OVS_RUNDIR=/r/n1") {
		t.Errorf("target node1: %+v %v", tgt, err)
	}
	if _, err := ResolveTarget(st, "default/nosuch"); err == nil {
		t.Error("missing pod resolved")
	}
	if _, err := ResolveTarget(st, "nosuch"); err == nil || !strings.Contains(err.Error(), "members: node1, ext1") {
		t.Errorf("missing member: %v", err)
	}
	if files, err := LogFiles(st, "node1"); err != nil || len(files) != 2 || !strings.HasSuffix(files[0], "kubelet.log") {
		t.Errorf("logs node1: %v %v", files, err)
	}
	if _, err := LogFiles(st, "nosuch"); err == nil {
		t.Error("logs of nothing")
	}
	if st.Alive() {
		t.Error("state without a supervisor is alive")
	}
}
