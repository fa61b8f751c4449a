package hostportfeature

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func hostPortPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "web", Ports: []v1.ContainerPort{
				{ContainerPort: 80, HostPort: 8080},
				{ContainerPort: 53, HostPort: 5353, Protocol: v1.ProtocolUDP, HostIP: "172.18.0.3"},
				{ContainerPort: 81}, // no hostPort
				{ContainerPort: 82, HostPort: 8082, HostIP: "not-an-ip"},
				{ContainerPort: 83, HostPort: 8083, HostIP: "127.0.0.1"},
			}}},
			InitContainers: []v1.Container{
				{Name: "sidecar", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways), Ports: []v1.ContainerPort{{ContainerPort: 9090, HostPort: 9090}}},
				{Name: "init", Ports: []v1.ContainerPort{{ContainerPort: 9091, HostPort: 9091}}},
			},
		},
		Status: v1.PodStatus{Phase: v1.PodRunning, PodIPs: []v1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:10:244:1::5"}}},
	}
}

func TestMappings(t *testing.T) {
	ms, bad := Mappings(hostPortPod())
	var got []string
	for _, m := range ms {
		got = append(got, m.String())
	}
	want := []string{
		"TCP *:8080 -> 10.244.1.5:80", "TCP *:8080 -> [fd00:10:244:1::5]:80",
		"UDP 172.18.0.3:5353 -> 10.244.1.5:53",
		"TCP 127.0.0.1:8083 -> 10.244.1.5:83",
		"TCP *:9090 -> 10.244.1.5:9090", "TCP *:9090 -> [fd00:10:244:1::5]:9090",
	}
	if !slices.Equal(got, want) {
		t.Errorf("mappings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(bad) != 1 || !strings.Contains(bad[0], `spec.containers[web].ports[3].hostIP "not-an-ip"`) {
		t.Errorf("problems %q, want the unparsable hostIP named", bad)
	}
	for name, mod := range map[string]func(*v1.Pod){
		"host network": func(p *v1.Pod) { p.Spec.HostNetwork = true },
		"succeeded":    func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded },
		"no IPs yet":   func(p *v1.Pod) { p.Status.PodIPs = nil },
		"deleted":      func(p *v1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) },
	} {
		p := hostPortPod()
		mod(p)
		if ms, _ := Mappings(p); len(ms) != 0 {
			t.Errorf("%s: %d mappings, want none", name, len(ms))
		}
	}
}

func TestHostRules(t *testing.T) {
	ms, _ := Mappings(hostPortPod())
	var got []string
	for _, r := range HostRules([]netip.Addr{netip.MustParseAddr("172.18.0.3"), netip.MustParseAddr("fd00:18::3")}, ms) {
		got = append(got, r.String())
	}
	for _, want := range []string{
		"172.18.0.3 . tcp . 8080 : 10.244.1.5 . 80",
		"127.0.0.1 . tcp . 8080 : 10.244.1.5 . 80",
		"fd00:18::3 . tcp . 8080 : fd00:10:244:1::5 . 80",
		"::1 . tcp . 8080 : fd00:10:244:1::5 . 80",
		"172.18.0.3 . udp . 5353 : 10.244.1.5 . 53",
		"127.0.0.1 . tcp . 8083 : 10.244.1.5 . 83",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("no rule %q in:\n%s", want, strings.Join(got, "\n"))
		}
	}
	for _, r := range got {
		if strings.HasPrefix(r, "127.0.0.1 . udp . 5353") || strings.HasPrefix(r, "172.18.0.3 . tcp . 8083") {
			t.Errorf("rule %q: a hostIP's port is on that address only", r)
		}
	}
}
