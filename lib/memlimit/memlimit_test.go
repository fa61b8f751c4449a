package memlimit

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLimit(t *testing.T) {
	for _, c := range []struct {
		name, self string
		files      map[string]string
		want       int64
		wantErr    bool
	}{
		{name: "v2 pod", self: "0::/kubepods/pod1/c1\n",
			files: map[string]string{"kubepods/pod1/c1/memory.max": "536870912\n"}, want: 512 << 20},
		{name: "v2 namespaced (the container's cgroup is the root)", self: "0::/\n",
			files: map[string]string{"memory.max": "268435456\n"}, want: 256 << 20},
		{name: "v2 no limit", self: "0::/a\n", files: map[string]string{"a/memory.max": "max\n"}},
		{name: "v1", self: "12:pids:/x\n4:memory:/kubepods/pod2\n1:name=systemd:/x\n",
			files: map[string]string{"memory/kubepods/pod2/memory.limit_in_bytes": "1073741824\n"}, want: 1 << 30},
		{name: "v1 no limit", self: "4:memory,cpuset:/a\n",
			files: map[string]string{"memory/a/memory.limit_in_bytes": "9223372036854771712\n"}},
		{name: "v1 seen from inside (path not mounted, the root is)", self: "4:memory:/kubepods/pod3\n",
			files: map[string]string{"memory/memory.limit_in_bytes": "104857600\n"}, want: 100 << 20},
		{name: "no memory controller", self: "12:pids:/x\n"},
		{name: "garbage", self: "0::/a\n", files: map[string]string{"a/memory.max": "lots\n"}, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			self := filepath.Join(dir, "self-cgroup")
			write(t, self, c.self)
			for p, content := range c.files {
				write(t, filepath.Join(root, p), content)
			}
			got, path, err := Limit(self, root)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v", err)
			}
			if got != c.want {
				t.Errorf("limit %d (from %s), want %d", got, path, c.want)
			}
		})
	}
}

func TestApplyKeepsGOMEMLIMIT(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "300MiB")
	if n, msg := Apply(); n != 0 || msg != "GOMEMLIMIT=300MiB from the environment" {
		t.Errorf("Apply() = %d, %q", n, msg)
	}
}

func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	if msg := SetGCPercent(40); msg != "garbage collector target 40% (GOGC)" {
		t.Errorf("SetGCPercent(40) = %q", msg)
	}
	if p := debug.SetGCPercent(100); p != 40 {
		t.Errorf("the target is %d, want 40", p)
	}
	t.Setenv("GOGC", "200")
	if msg := SetGCPercent(40); msg != "GOGC=200 from the environment" {
		t.Errorf("with GOGC set: %q", msg)
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GOGC set, the target became %d", p)
	}
}
