package cleanup

import (
	"bytes"
	"encoding/json"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"nodeflow/host/cni"
	"nodeflow/host/netstack"
)

func prefixNet(s string) *net.IPNet {
	p := netip.MustParsePrefix(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func addr(s string) netlink.Addr { return netlink.Addr{IPNet: prefixNet(s)} }

func route(dst, gw string) netlink.Route {
	r := netlink.Route{Table: unix.RT_TABLE_MAIN}
	if dst != "" {
		r.Dst = prefixNet(dst)
	}
	if gw != "" {
		r.Gw = net.ParseIP(gw)
	}
	return r
}

var testOptions = Options{
	OVSRundir: "/run/ovs", PodBridge: "br0", GatewayBridge: "breth0", Uplink: "eth0",
	Masquerade: []netip.Prefix{netip.MustParsePrefix("169.254.169.0/29"), netip.MustParsePrefix("fd69::/125")},
	CNIConfDir: "/etc/cni/net.d", CNIDataDir: "/var/lib/cni/networks", CNIBin: "/opt/cni/bin/nodeflow",
	Socket: "/run/nodeflow/nodeflow.sock",
}

// agentNode is a node as the agent leaves it, with the userspace datapath:
// the node's addresses and routes on breth0 beside the agent's own, the
// uplink quiet, both bridges, the tables, the files.
func agentNode() Facts {
	quiet := map[string]string{}
	for k, v := range netstack.QuietSysctls {
		quiet[k] = v
	}
	return Facts{
		OVSDB: true,
		Bridges: []Bridge{
			{Name: "br0", UUID: "u-br0", ExternalIDs: map[string]string{"created-by": "nodeflow-agent"}, Interfaces: []string{"br0", "mp0"}, PodPorts: 2},
			{Name: "breth0", UUID: "u-breth0", ExternalIDs: map[string]string{"created-by": "nodeflow-agent"}, Interfaces: []string{"breth0"}},
		},
		Gateway: &netstack.L3Config{
			Addrs: []netlink.Addr{addr("172.30.0.11/24"), addr("fd00:172:30::11/64"), addr("169.254.169.2/29"), addr("fd69::2/125")},
			Routes: []netlink.Route{
				route("", "172.30.0.1"), route("", "fd00:172:30::1"), route("10.1.0.0/16", "172.30.0.254"),
				route("10.96.0.0/16", "169.254.169.4"), route("fd00:10:96::/112", "fd69::4"), route("169.254.169.1/32", ""),
			},
		},
		Uplink:        &netstack.L3Config{},
		UplinkPromisc: true,
		SysctlLink:    "eth0",
		Sysctls:       quiet,
		TxChecksum:    ptr(false),
		StateFile:     "/var/lib/cni/networks/" + netstack.UplinkStateFile,
		NodeL3File:    "/var/lib/cni/networks/" + netstack.NodeL3File,
		State: &netstack.UplinkState{Uplink: "eth0", Sysctls: map[string]string{"arp_ignore": "0", "arp_announce": "1", "disable_ipv6": "0"},
			TxChecksum: ptr(true)},
		NFTables: []NFTable{{"ip", "nodeflow"}, {"ip", "nodeflow-hostports"}, {"ip6", "nodeflow"}},
		CNIConf:  []ConfFile{{Path: "/etc/cni/net.d/10-nodeflow.conf", Ours: true}},
		Socket:   "/run/nodeflow/nodeflow.sock",
		IPAM:     &IPAMStore{Dir: "/var/lib/cni/networks/nodeflow"},
		CNIBin:   true,
	}
}

func ptr[T any](v T) *T { return &v }

func stepStrings(p Plan) []string {
	var out []string
	for _, s := range p.Steps {
		out = append(out, s.String())
	}
	return out
}

func TestPlanAgentNode(t *testing.T) {
	p := Make(testOptions, agentNode())
	want := []string{
		"remove CNI configuration /etc/cni/net.d/10-nodeflow.conf",
		"restore sysctl disable_ipv6 of eth0: 1 -> 0",
		"restore sysctl arp_ignore of eth0: 1 -> 0",
		"restore sysctl arp_announce of eth0: 2 -> 1",
		"restore TX checksum offload of eth0: off -> on",
		"give address back 172.30.0.11/24 to eth0",
		"give address back fd00:172:30::11/64 to eth0",
		"give route back default via 172.30.0.1 to eth0",
		"give route back default via fd00:172:30::1 to eth0",
		"give route back 10.1.0.0/16 via 172.30.0.254 to eth0",
		"delete bridge br0",
		"delete bridge breth0",
		"turn promiscuous mode off on eth0",
		"delete nftables table ip nodeflow",
		"delete nftables table ip nodeflow-hostports",
		"delete nftables table ip6 nodeflow",
		"remove introspection socket /run/nodeflow/nodeflow.sock",
		"remove IPAM store /var/lib/cni/networks/nodeflow",
		"remove CNI plugin /opt/cni/bin/nodeflow",
		"remove node address record /var/lib/cni/networks/" + netstack.NodeL3File,
		"remove uplink record /var/lib/cni/networks/" + netstack.UplinkStateFile,
	}
	if got := stepStrings(p); !slices.Equal(got, want) {
		t.Errorf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "br0 holds 2 pod ports") {
		t.Errorf("notes = %q, want one about br0's pod ports", p.Notes)
	}
}

// After a run, or where the agent never ran, there is nothing to do.
func TestPlanNothingToDo(t *testing.T) {
	clean := Facts{OVSDB: true, Uplink: &netstack.L3Config{Addrs: []netlink.Addr{addr("172.30.0.11/24")}}, SysctlLink: "eth0",
		Sysctls: map[string]string{"arp_ignore": "0", "arp_announce": "0", "disable_ipv6": "0"}}
	if p := Make(testOptions, clean); !p.Empty() || len(p.Notes) != 0 {
		t.Errorf("clean node: steps %q, notes %q; want none", stepStrings(p), p.Notes)
	}
	// Without OVS: nothing to do, and a note saying no bridge was looked at.
	clean.OVSDB = false
	if p := Make(testOptions, clean); !p.Empty() || len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "no OVSDB server") {
		t.Errorf("no OVS: steps %q, notes %q", stepStrings(p), p.Notes)
	}
}

// Addresses and routes the uplink already has (an interrupted run) are not
// given back twice.
func TestPlanPartlyDone(t *testing.T) {
	f := agentNode()
	f.Uplink = &netstack.L3Config{Addrs: []netlink.Addr{addr("172.30.0.11/24")}, Routes: []netlink.Route{route("", "172.30.0.1")}}
	f.Sysctls = map[string]string{"arp_ignore": "0", "arp_announce": "1", "disable_ipv6": "0"}
	f.TxChecksum = ptr(true)
	got := stepStrings(Make(testOptions, f))
	for _, s := range got {
		if strings.Contains(s, "172.30.0.11/24") || strings.Contains(s, "via 172.30.0.1 ") || strings.HasPrefix(s, "restore ") {
			t.Errorf("step %q: already done", s)
		}
	}
	if !slices.Contains(got, "give address back fd00:172:30::11/64 to eth0") || !slices.Contains(got, "remove uplink record /var/lib/cni/networks/"+netstack.UplinkStateFile) {
		t.Errorf("steps %q lack the IPv6 address or the record", got)
	}
}

// Without a record, the sysctls nodeflow set get the kernel's defaults, and
// only those.
func TestPlanSysctlsWithoutRecord(t *testing.T) {
	f := agentNode()
	f.State, f.StateFile = nil, ""
	f.Sysctls["arp_announce"] = "1" // not nodeflow's value: the operator's
	p := Make(testOptions, f)
	got := stepStrings(p)
	want := []string{"restore sysctl disable_ipv6 of eth0: 1 -> 0", "restore sysctl arp_ignore of eth0: 1 -> 0"}
	var sysctls []string
	for _, s := range got {
		if strings.HasPrefix(s, "restore sysctl") {
			sysctls = append(sysctls, s)
		}
		if strings.HasPrefix(s, "remove uplink record") {
			t.Errorf("step %q without a record", s)
		}
	}
	if !slices.Equal(sysctls, want) {
		t.Errorf("sysctl steps %q, want %q", sysctls, want)
	}
	if !slices.ContainsFunc(p.Notes, func(n string) bool {
		return strings.Contains(n, "kernel's defaults") && strings.Contains(n, "disable_ipv6, arp_ignore")
	}) {
		t.Errorf("notes %q: none says the kernel's defaults were used", p.Notes)
	}
}

// The TX checksum offload gets its recorded value back; without one it is
// left as it is, with a note when nodeflow was on the node and it is off.
func TestPlanTxChecksum(t *testing.T) {
	record := "remove uplink record /var/lib/cni/networks/" + netstack.UplinkStateFile
	for _, c := range []struct {
		name     string
		recorded *bool // nil: a record without it (an older agent's)
		noRecord bool
		now      *bool // nil: cannot be read
		clean    bool  // nodeflow gone: no bridge, sysctls not nodeflow's
		step     string
		note     string
		record   bool // the record is removed
	}{
		{name: "recorded on, now off", recorded: ptr(true), now: ptr(false), step: "restore TX checksum offload of eth0: off -> on", record: true},
		{name: "recorded off, now on", recorded: ptr(false), now: ptr(true), step: "restore TX checksum offload of eth0: on -> off", record: true},
		{name: "recorded off, now off", recorded: ptr(false), now: ptr(false), record: true},
		{name: "recorded on, now on", recorded: ptr(true), now: ptr(true), record: true},
		{name: "recorded, unreadable", recorded: ptr(true), now: nil, note: "cannot read the TX checksum offload of eth0: not restored (recorded: on)"},
		{name: "older record, now off", now: ptr(false), note: "its original value is unknown", record: true},
		{name: "older record, now on", now: ptr(true), record: true},
		{name: "no record, now off", noRecord: true, now: ptr(false), note: "no record of the original TX checksum offload of eth0"},
		{name: "no record, now on", noRecord: true, now: ptr(true)},
		{name: "no record, unreadable", noRecord: true, now: nil},
		{name: "clean node, now off", noRecord: true, now: ptr(false), clean: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := agentNode()
			f.State.TxChecksum, f.TxChecksum = c.recorded, c.now
			if c.noRecord {
				f.State, f.StateFile = nil, ""
			}
			if c.clean {
				f.Bridges, f.Gateway, f.UplinkPromisc = nil, nil, false
				f.Sysctls = maps.Clone(KernelDefaults)
			}
			p := Make(testOptions, f)
			got := stepStrings(p)
			var tx []string
			for _, s := range got {
				if strings.Contains(s, "TX checksum") {
					tx = append(tx, s)
				}
			}
			if want := []string{c.step}; (c.step == "" && len(tx) > 0) || (c.step != "" && !slices.Equal(tx, want)) {
				t.Errorf("TX checksum steps %q, want %q", tx, c.step)
			}
			if c.step != "" {
				// With the sysctls, before the addresses and the bridges.
				i := slices.Index(got, c.step)
				if i < 1 || !strings.HasPrefix(got[i-1], "restore sysctl") || !strings.HasPrefix(got[i+1], "give address back") {
					t.Errorf("steps %q: the TX checksum offload not right after the sysctls", got)
				}
			}
			var txNotes []string
			for _, n := range p.Notes {
				if strings.Contains(n, "TX checksum") {
					txNotes = append(txNotes, n)
				}
			}
			if c.note == "" && len(txNotes) > 0 || c.note != "" && (len(txNotes) != 1 || !strings.Contains(txNotes[0], c.note)) {
				t.Errorf("TX checksum notes %q, want %q", txNotes, c.note)
			}
			if removed := slices.Contains(got, record); removed != c.record {
				t.Errorf("record removed: %v, want %v (steps %q)", removed, c.record, got)
			}
		})
	}
}

// The step applies as it prints (dry run).
func TestTxChecksumStepString(t *testing.T) {
	s := Step{Kind: SetTxChecksum, Link: "eth0", From: "off", To: "on"}
	if got, want := s.String(), "restore TX checksum offload of eth0: off -> on"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// A recorded disable_ipv6=1: the uplink had no IPv6, and gets none back.
func TestPlanIPv6DisabledBefore(t *testing.T) {
	f := agentNode()
	f.State.Sysctls["disable_ipv6"] = "1"
	p := Make(testOptions, f)
	for _, s := range stepStrings(p) {
		if strings.Contains(s, "fd00:") || strings.Contains(s, "disable_ipv6") {
			t.Errorf("step %q with IPv6 disabled before nodeflow", s)
		}
	}
	if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.Contains(n, "IPv6 stays disabled") }) {
		t.Errorf("notes %q: none about IPv6", p.Notes)
	}
}

// Bridges nodeflow did not create are left, and so is the uplink with
// them; bridges of the CNI plugin are nodeflow's.
func TestPlanBridgeOwners(t *testing.T) {
	f := agentNode()
	f.Bridges[0].ExternalIDs = map[string]string{"created-by": "nodeflow-cni"}
	f.Bridges[1].ExternalIDs = map[string]string{"created-by": "operator"}
	f.Bridges = append(f.Bridges, Bridge{Name: "brold", UUID: "u-old", ExternalIDs: map[string]string{"created-by": "nodeflow-agent"}})
	p := Make(testOptions, f)
	got := stepStrings(p)
	for _, s := range got {
		if strings.Contains(s, "breth0") || strings.Contains(s, "brold") || strings.HasPrefix(s, "give ") || strings.HasPrefix(s, "restore ") || strings.HasPrefix(s, "turn") ||
			strings.HasPrefix(s, "remove uplink record") || strings.HasPrefix(s, "remove node address record") {
			t.Errorf("step %q with an operator's gateway bridge", s)
		}
	}
	if !slices.Contains(got, "delete bridge br0") {
		t.Errorf("steps %q: br0 (the CNI plugin's) not deleted", got)
	}
	for _, want := range []string{"bridge breth0 was not created by nodeflow", "brold was created by nodeflow", "sysctls and TX checksum offload",
		netstack.NodeL3File + ", the node's addresses the agent keeps there, is left"} {
		if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Errorf("notes %q lack %q", p.Notes, want)
		}
	}
}

// Without the uplink the gateway bridge keeps the node's addresses.
func TestPlanNoUplink(t *testing.T) {
	f := agentNode()
	f.Uplink = nil
	got := stepStrings(Make(testOptions, f))
	if slices.Contains(got, "delete bridge breth0") || !slices.Contains(got, "delete bridge br0") {
		t.Errorf("steps %q: want br0 deleted, breth0 kept", got)
	}
}

// Pods that still hold addresses keep the IPAM store and the plugin, unless
// purged.
func TestPlanPodsLeft(t *testing.T) {
	f := agentNode()
	f.IPAM.PodAddrs = 3
	p := Make(testOptions, f)
	for _, s := range stepStrings(p) {
		if strings.HasPrefix(s, "remove IPAM") || strings.HasPrefix(s, "remove CNI plugin") {
			t.Errorf("step %q while pods hold addresses", s)
		}
	}
	if len(p.Notes) != 3 {
		t.Errorf("notes %q: want the pod ports, the IPAM store and the plugin", p.Notes)
	}
	o := testOptions
	o.Purge = true
	got := stepStrings(Make(o, f))
	if !slices.Contains(got, "remove IPAM store /var/lib/cni/networks/nodeflow") || !slices.Contains(got, "remove CNI plugin /opt/cni/bin/nodeflow") {
		t.Errorf("purge: steps %q", got)
	}
}

// Files that are not nodeflow's are left.
func TestPlanForeignFiles(t *testing.T) {
	f := agentNode()
	f.CNIConf = []ConfFile{{Path: "/etc/cni/net.d/10-nodeflow.conf", Reason: `network "other", type "bridge"`}}
	f.NotSocket = true
	p := Make(testOptions, f)
	for _, s := range stepStrings(p) {
		if strings.HasPrefix(s, "remove CNI configuration") || strings.HasPrefix(s, "remove introspection") {
			t.Errorf("step %q on a file that is not nodeflow's", s)
		}
	}
}

func TestNodeflowConf(t *testing.T) {
	for _, c := range []struct {
		conf string
		ours bool
	}{
		{`{"cniVersion": "1.0.0", "name": "nodeflow", "type": "nodeflow"}`, true},
		{`{"name": "nodeflow", "type": "bridge"}`, false},
		{`{"name": "other", "type": "nodeflow"}`, false},
		{`not json`, false},
	} {
		if ours, why := nodeflowConf([]byte(c.conf)); ours != c.ours {
			t.Errorf("%s: ours %v (%s), want %v", c.conf, ours, why, c.ours)
		}
	}
}

func TestOwnRoute(t *testing.T) {
	for _, c := range []struct {
		r   netlink.Route
		own bool
	}{
		{route("10.96.0.0/16", "169.254.169.4"), true},
		{route("fd00:10:96::/112", "fd69::4"), true},
		{route("169.254.169.1/32", ""), true},
		{route("fd69::1/128", ""), true},
		{route("169.254.0.0/16", ""), false}, // wider than the masquerade subnet
		{route("", "172.30.0.1"), false},
		{route("10.1.0.0/16", "172.30.0.254"), false},
	} {
		if got := ownRoute(testOptions.Masquerade, c.r); got != c.own {
			t.Errorf("%s: own %v, want %v", routeString(c.r), got, c.own)
		}
	}
}

func TestRouteString(t *testing.T) {
	r := route("0.0.0.0/0", "172.30.0.1")
	r.Priority = 100
	for r, want := range map[*netlink.Route]string{&r: "default via 172.30.0.1 metric 100", {Dst: prefixNet("::/0")}: "default",
		{Dst: prefixNet("10.0.0.0/8"), Src: net.ParseIP("10.0.0.1")}: "10.0.0.0/8 src 10.0.0.1"} {
		if got := routeString(*r); got != want {
			t.Errorf("routeString = %q, want %q", got, want)
		}
	}
}

func TestUplinkAddr(t *testing.T) {
	a := uplinkAddr(addr("172.30.0.11/24"))
	if !a.Broadcast.Equal(net.IPv4zero) || a.Flags != 0 {
		t.Errorf("IPv4 without broadcast: broadcast %v, flags %x; want 0.0.0.0 (none), 0", a.Broadcast, a.Flags)
	}
	b := addr("172.30.0.11/24")
	b.Broadcast = net.ParseIP("172.30.0.255")
	if a := uplinkAddr(b); !a.Broadcast.Equal(b.Broadcast) {
		t.Errorf("IPv4 broadcast %v, want %v", a.Broadcast, b.Broadcast)
	}
	if a := uplinkAddr(addr("fd00::11/64")); a.Flags != unix.IFA_F_NODAD || a.Broadcast != nil {
		t.Errorf("IPv6: flags %x broadcast %v, want nodad and none", a.Flags, a.Broadcast)
	}
}

// The agent's record, written once, is what cleanup reads back (on lo,
// whose sysctls anyone can read).
func TestUplinkRecord(t *testing.T) {
	if _, err := os.Stat(netstack.UplinkSysctlPath("lo", "arp_ignore")); err != nil {
		t.Skipf("no /proc/sys for lo: %v", err)
	}
	dir := t.TempDir()
	path := netstack.UplinkStatePath(dir)
	wrote, err := netstack.RecordUplinkSysctls(logrus.New(), path, "lo")
	if err != nil {
		t.Fatal(err)
	}
	var f Facts
	if err := inspectSysctls(Options{Uplink: "eth9", CNIDataDir: dir}, &f); err != nil {
		t.Fatal(err)
	}
	quiet := f.TxChecksum == nil || !*f.TxChecksum
	for name, v := range netstack.QuietSysctls {
		quiet = quiet && f.Sysctls[name] == v
	}
	if wrote == quiet {
		t.Fatalf("recorded %v with lo's sysctls %v and TX checksum offload %v (nodeflow's values: %v)", wrote, f.Sysctls, f.TxChecksum, quiet)
	}
	if !wrote {
		t.Skip("lo holds nodeflow's values: nothing recorded")
	}
	if f.State == nil || f.SysctlLink != "lo" || f.StateFile != path || len(f.State.Sysctls) != 3 {
		t.Fatalf("facts %+v, state %+v", f, f.State)
	}
	for name, v := range f.State.Sysctls {
		if f.Sysctls[name] != v {
			t.Errorf("%s: recorded %q, now %q", name, v, f.Sysctls[name])
		}
	}
	if on, err := cni.TxChecksum("", "lo"); err != nil {
		if f.State.TxChecksum != nil || f.TxChecksum != nil {
			t.Errorf("lo's TX checksum offload unreadable (%v), but recorded %v, read %v", err, f.State.TxChecksum, f.TxChecksum)
		}
	} else if f.State.TxChecksum == nil || *f.State.TxChecksum != on || f.TxChecksum == nil || *f.TxChecksum != on {
		t.Errorf("lo's TX checksum offload is %v: recorded %v, read %v", on, f.State.TxChecksum, f.TxChecksum)
	}
	// A second agent start records nothing: the file holds the originals.
	if err := os.WriteFile(path, []byte(`{"uplink":"lo","sysctls":{"arp_ignore":"7"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if wrote, err := netstack.RecordUplinkSysctls(logrus.New(), path, "lo"); wrote || err != nil {
		t.Errorf("second record: wrote %v, %v", wrote, err)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), `"7"`) {
		t.Errorf("the record was rewritten: %s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, netstack.UplinkStateFile+".tmp")); err == nil {
		t.Error("temporary file left")
	}
}

// fakeSysctls points hostnet.ProcSysNet at a directory holding the uplink
// sysctls of link with the values vals, for the test's duration.
func fakeSysctls(t *testing.T, link string, vals map[string]string) {
	t.Helper()
	saved := netstack.ProcSysNet
	netstack.ProcSysNet = t.TempDir()
	t.Cleanup(func() { netstack.ProcSysNet = saved })
	for name, v := range vals {
		path := netstack.UplinkSysctlPath(link, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The TX checksum offload is among nodeflow's values when it is off (or
// cannot be read): sysctls at nodeflow's values with the offload on are
// somebody else's, and are recorded; an offload that cannot be read is left
// out of the record, with a warning, and the sysctls are recorded.
func TestRecordUplinkTxChecksum(t *testing.T) {
	const missing = "nfnone0" // no such interface: its offload cannot be read
	if _, err := cni.TxChecksum("", missing); err == nil {
		t.Skipf("an interface %s exists", missing)
	}
	read := func(t *testing.T, path string) netstack.UplinkState {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var st netstack.UplinkState
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return st
	}

	t.Run("quiet sysctls, offload on", func(t *testing.T) {
		on, err := cni.TxChecksum("", "lo")
		if err != nil || !on {
			t.Skipf("lo's TX checksum offload: %v, %v; want on", on, err)
		}
		fakeSysctls(t, "lo", netstack.QuietSysctls)
		path := netstack.UplinkStatePath(t.TempDir())
		wrote, err := netstack.RecordUplinkSysctls(logrus.New(), path, "lo")
		if err != nil || !wrote {
			t.Fatalf("wrote %v, %v; want the record written", wrote, err)
		}
		if st := read(t, path); st.TxChecksum == nil || !*st.TxChecksum || !maps.Equal(st.Sysctls, netstack.QuietSysctls) {
			t.Errorf("record %+v, want nodeflow's sysctls and the offload on", st)
		}
	})
	t.Run("quiet sysctls, offload unreadable", func(t *testing.T) {
		fakeSysctls(t, missing, netstack.QuietSysctls)
		path := netstack.UplinkStatePath(t.TempDir())
		if wrote, err := netstack.RecordUplinkSysctls(logrus.New(), path, missing); wrote || err != nil {
			t.Errorf("wrote %v, %v; want nothing: all values may be nodeflow's", wrote, err)
		}
		if _, err := os.Stat(path); err == nil {
			t.Error("record written")
		}
	})
	t.Run("other sysctls, offload unreadable", func(t *testing.T) {
		fakeSysctls(t, missing, KernelDefaults)
		path := netstack.UplinkStatePath(t.TempDir())
		var logs bytes.Buffer
		log := logrus.New()
		log.SetOutput(&logs)
		wrote, err := netstack.RecordUplinkSysctls(log, path, missing)
		if err != nil || !wrote {
			t.Fatalf("wrote %v, %v; want the record written", wrote, err)
		}
		if st := read(t, path); st.TxChecksum != nil || !maps.Equal(st.Sysctls, KernelDefaults) {
			t.Errorf("record %+v, want the sysctls and no offload", st)
		}
		if b, _ := os.ReadFile(path); strings.Contains(string(b), "txChecksum") {
			t.Errorf("record %s holds txChecksum", b)
		}
		if !strings.Contains(logs.String(), "TX checksum offload") || !strings.Contains(logs.String(), "level=warning") {
			t.Errorf("log %q: no warning about the offload", logs.String())
		}
	})
}
