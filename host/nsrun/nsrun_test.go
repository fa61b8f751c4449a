package nsrun

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestDoRunsInTheNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
			t.Fatal("needs root for network namespaces")
		}
		t.Skip("needs root for network namespaces")
	}
	name := "nfnsrun-" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	if out, err := exec.Command("ip", "-n", name, "link", "add", "nsrun0", "type", "veth", "peer", "name", "nsrun1").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}

	var inside []string
	if err := Do("/run/netns/"+name, func() error {
		links, err := netlink.LinkList()
		for _, l := range links {
			inside = append(inside, l.Attrs().Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(inside, ","); !strings.Contains(got, "nsrun0") {
		t.Errorf("links seen inside: %s, want nsrun0 among them", got)
	}
	// The calling goroutine's namespace is untouched.
	if _, err := netlink.LinkByName("nsrun0"); err == nil {
		t.Error("nsrun0 is visible outside its namespace")
	}
	if err := Do("/run/netns/"+name+"-missing", func() error { return nil }); err == nil || !strings.Contains(err.Error(), "open netns") {
		t.Errorf("missing namespace: %v", err)
	}
}
