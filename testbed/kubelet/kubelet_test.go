package kubelet

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestPorts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pod      v1.PodSpec
		tcp, udp []int
	}{
		{"no ports", v1.PodSpec{Containers: []v1.Container{{Name: "a"}}}, []int{8080}, nil},
		{"tcp and udp over two containers, with a duplicate", v1.PodSpec{Containers: []v1.Container{
			{Name: "a", Ports: []v1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 53, Protocol: v1.ProtocolUDP}}},
			{Name: "b", Ports: []v1.ContainerPort{{ContainerPort: 80, Protocol: v1.ProtocolTCP}, {ContainerPort: 9000, Protocol: v1.ProtocolSCTP}}},
		}}, []int{80}, []int{53}},
		{"udp only", v1.PodSpec{Containers: []v1.Container{{Name: "a", Ports: []v1.ContainerPort{{ContainerPort: 53, Protocol: v1.ProtocolUDP}}}}}, nil, []int{53}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tcp, udp := ports(&v1.Pod{Spec: tc.pod})
			if !reflect.DeepEqual(tcp, tc.tcp) || !reflect.DeepEqual(udp, tc.udp) {
				t.Errorf("ports = %v %v, want %v %v", tcp, udp, tc.tcp, tc.udp)
			}
		})
	}
}

func TestResolvePort(t *testing.T) {
	c := v1.Container{Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	for _, tc := range []struct {
		port intstr.IntOrString
		want int
		ok   bool
	}{
		{intstr.FromInt32(81), 81, true},
		{intstr.FromString("http"), 8080, true},
		{intstr.FromString("nosuch"), 0, false},
	} {
		got, err := resolvePort(tc.port, c)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("resolvePort(%v) = %d, %v", tc.port.String(), got, err)
		}
	}
}

func TestResultIPs(t *testing.T) {
	ips, err := resultIPs([]byte(`{"cniVersion":"1.0.0","ips":[{"address":"10.244.1.2/24"},{"address":"fd00::2/64"}]}`))
	if err != nil || !reflect.DeepEqual(ips, []string{"10.244.1.2", "fd00::2"}) {
		t.Errorf("resultIPs = %v, %v", ips, err)
	}
	for _, bad := range []string{`{`, `{"ips":[]}`, `{"ips":[{"address":"10.0.0.1"}]}`} {
		if _, err := resultIPs([]byte(bad)); err == nil {
			t.Errorf("resultIPs(%s) accepted", bad)
		}
	}
}

func TestReadConfDir(t *testing.T) {
	dir := t.TempDir()
	if c, err := readConfDir(filepath.Join(dir, "missing")); c != nil || err != nil {
		t.Errorf("missing dir: %v %v", c, err)
	}
	os.WriteFile(filepath.Join(dir, "README"), []byte("x"), 0o644)
	if c, err := readConfDir(dir); c != nil || err != nil {
		t.Errorf("dir without configs: %v %v", c, err)
	}
	os.WriteFile(filepath.Join(dir, "10-nodeflow.conflist"), []byte(`{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"nodeflow","bridge":"br1"}]}`), 0o644)
	os.WriteFile(filepath.Join(dir, "20-other.conf"), []byte(`{"type":"other"}`), 0o644)
	c, err := readConfDir(dir)
	if err != nil || c["type"] != "nodeflow" || c["name"] != "net" || c["cniVersion"] != "1.0.0" || c["bridge"] != "br1" {
		t.Errorf("conflist: %v %v", c, err)
	}
	os.WriteFile(filepath.Join(dir, "05-bad.conflist"), []byte(`{"plugins":[]}`), 0o644)
	if _, err := readConfDir(dir); err == nil {
		t.Error("list without plugins accepted")
	}
}

func TestStatusEqualIgnoresTimes(t *testing.T) {
	a := &v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}
	b := a.DeepCopy()
	b.Conditions[0].LastTransitionTime.Time = b.Conditions[0].LastTransitionTime.Add(5)
	if !statusEqual(a, b) {
		t.Error("times count")
	}
	b.Conditions[0].Status = v1.ConditionFalse
	if statusEqual(a, b) {
		t.Error("status change not seen")
	}
}
