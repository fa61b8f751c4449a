package agent

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"nodeflow/datapath/conntrack"
	"nodeflow/host/netstack"
	"nodeflow/host/repair"
	"nodeflow/testbed/nsutil"
)

func TestNodeL3KeeperWants(t *testing.T) {
	k := newNodeL3Keeper("breth0", netstack.NodeL3{}, nil, nil)
	for _, tc := range []struct {
		ev      netstack.Event
		failing bool
		want    bool
	}{
		{netstack.Event{Kind: netstack.AddrEvents, Deleted: true}, false, true},
		{netstack.Event{Kind: netstack.AddrEvents}, false, false},
		{netstack.Event{Kind: netstack.AddrEvents}, true, true},
		{netstack.Event{Kind: netstack.RouteEvents, Deleted: true}, false, true},
		{netstack.Event{Kind: netstack.RouteEvents}, false, false},
		{netstack.Event{Kind: netstack.LinkEvents}, false, true},
		{netstack.Event{Kind: netstack.Resync}, false, true},
		{netstack.Event{Kind: netstack.NeighEvents, Deleted: true}, false, false},
	} {
		k.failing.Store(tc.failing)
		if got := k.wants(tc.ev); got != tc.want {
			t.Errorf("wants(%+v) with failing=%v = %v", tc.ev, tc.failing, got)
		}
	}
}

// TestNodeL3Keeper moves an uplink's addresses to a bridge in a network
// namespace as the agent's start-up does, records them, and keeps them: a
// deleted address comes back at the next check and counts as repaired;
// one that cannot (IPv6 disabled on the bridge) fails, shows as failing
// after the grace, and works again once IPv6 is back.
func TestNodeL3Keeper(t *testing.T) {
	nsutil.InNew(t, func() {
		for _, name := range []string{"eth0", "breth0"} {
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{name, name + "p"} {
				l, _ := netlink.LinkByName(n)
				if err := netlink.LinkSetUp(l); err != nil {
					t.Fatal(err)
				}
			}
		}
		eth0, _ := netlink.LinkByName("eth0")
		for _, s := range []string{"172.30.0.11/24", "fd00:172:30::11/64"} {
			addr, _ := netlink.ParseAddr(s)
			addr.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(eth0, addr); err != nil {
				t.Fatal(err)
			}
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP("172.30.0.1")}); err != nil {
			t.Fatal(err)
		}
		log, _ := logtest.NewNullLogger()
		clock := clocktesting.NewFakeClock(time.Now())
		repairs := repair.New(repair.Options{Log: log, Clock: clock})
		a, _ := testAgent(t)
		a.cfg.CNIDataDir = t.TempDir()
		a.cfg.Masquerade = conntrack.DefaultPlan()
		a.repairs = repairs

		found, err := netstack.ReadL3Config("breth0")
		if err != nil {
			t.Fatal(err)
		}
		moved, err := netstack.MoveUplinkConfig(log, "eth0", "breth0")
		if err != nil {
			t.Fatal(err)
		}
		kept := a.keepNodeL3(nil, found, moved)
		if len(kept.Addrs) != 2 || len(kept.Routes) != 1 {
			t.Fatalf("kept %+v", kept)
		}
		rec, err := netstack.LoadNodeL3(netstack.NodeL3Path(a.cfg.CNIDataDir))
		if err != nil || rec == nil || !rec.Equal(kept) {
			t.Fatalf("record %+v, %v", rec, err)
		}
		// A restart with nothing left on the uplink keeps the record as
		// it is.
		if again := a.keepNodeL3(rec, found, netstack.L3Config{}); !again.Recorded.Equal(rec.Recorded) {
			t.Errorf("the record was written again: %v, was %v", again.Recorded, rec.Recorded)
		}

		k := newNodeL3Keeper("breth0", kept, log, repairs)
		br, _ := netlink.LinkByName("breth0")
		addr4, _ := netlink.ParseAddr("172.30.0.11/24")
		if err := netlink.AddrDel(br, addr4); err != nil {
			t.Fatal(err)
		}
		if !k.check() {
			t.Fatalf("check after deleting the IPv4 address: %v", repairs.Failing())
		}
		// The address and the default route the kernel took with it.
		if st, _ := netstack.ReadL3State("breth0", kept); !kept.Missing(st).Empty() {
			t.Fatalf("still missing %+v", kept.Missing(st))
		}

		sysctl := filepath.Join(netstack.ProcSysNet, "ipv6/conf/breth0/disable_ipv6")
		if err := os.WriteFile(sysctl, []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
		if k.check() {
			t.Fatal("check with IPv6 disabled on the bridge succeeded")
		}
		clock.Step(repair.DefaultGrace)
		k.check()
		if fs := repairs.Failing(); len(fs) != 1 || fs[0].What != netstack.RepairNodeAddress || fs[0].Attempts != 2 {
			t.Fatalf("failing = %v", fs)
		}
		if err := os.WriteFile(sysctl, []byte("0"), 0o644); err != nil {
			t.Fatal(err)
		}
		if !k.check() || len(repairs.Failing()) != 0 {
			t.Fatalf("IPv6 back: failing = %v", repairs.Failing())
		}
	})
}
