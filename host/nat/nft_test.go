package nat

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"nodeflow/host/nsrun"
)

// skipOrFail skips the test, or fails it when NODEFLOW_REQUIRE_OVS is set
// (integration tests must not pass by not running).
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// testNetns creates a network namespace for the test, deleted at its end,
// and returns its name and an open descriptor of it. It skips (or fails)
// without root or nf_tables.
func testNetns(t testing.TB) (string, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "hostnat: needs root for a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skipOrFail(t, "hostnat: no ip command: %v", err)
	}
	name := fmt.Sprintf("nf-hostnat-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		skipOrFail(t, "hostnat: ip netns add: %v: %s", err, out)
	}
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		_ = exec.Command("ip", "netns", "del", name).Run()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	if err := NewApplier(Options{NetNS: int(f.Fd())}).Delete(); err != nil {
		skipOrFail(t, "hostnat: nf_tables unusable in a fresh namespace: %v", err)
	}
	return name, int(f.Fd())
}

// needNft skips the test when the nft command (the oracle) is missing, or
// fails it when NODEFLOW_REQUIRE_OVS is set.
func needNft(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		skipOrFail(t, "hostnat: no nft command, the oracle of this test (make deps installs nftables): %v", err)
	}
}

// nftList returns `nft list table <family> <table>` in the namespace (the
// oracle).
func nftList(t *testing.T, ns, fam, table string) (string, error) {
	t.Helper()
	needNft(t)
	out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", fam, table).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nft list table %s %s: %v: %s", fam, table, err, out)
	}
	return string(out), nil
}

func requireNft(t *testing.T, ns, fam, table string, want ...string) {
	t.Helper()
	out, err := nftList(t, ns, fam, table)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("nft list table %s %s lacks %q:\n%s", fam, table, w, out)
		}
	}
}

func sampleRuleset() Ruleset {
	rs, _ := Build([]netip.Addr{node4, node6}, []Port{
		{Name: "a", Protocol: ProtoTCP, Port: 80, NodePort: 30080, ClusterIPs: []netip.Addr{cip4, cip6}, ExternalIPs: []netip.Addr{ext4, ext6}},
		{Name: "b", Protocol: ProtoUDP, Port: 53, NodePort: 30053, ClusterIPs: []netip.Addr{cip4}, LoadBalancerIPs: []netip.Addr{lb4}},
		{Name: "c", Protocol: ProtoSCTP, Port: 9999, NodePort: 31999, ClusterIPs: []netip.Addr{cip4, cip6}},
	})
	return rs
}

func readBack(t *testing.T, a *Applier) Ruleset {
	t.Helper()
	rs, found, err := a.Read()
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("Read: no tables")
	}
	return rs
}

// TestApplierInNamespace programs the tables in a fresh namespace and
// reads them back with the library and with nft.
func TestApplierInNamespace(t *testing.T) {
	ns, fd := testNetns(t)
	a := NewApplier(Options{NetNS: fd})
	want := sampleRuleset()
	if want.Len() != 8 {
		t.Fatalf("sample: %d rules, want 8: %v", want.Len(), want)
	}

	t.Run("replace", func(t *testing.T) {
		if err := a.Replace(want); err != nil {
			t.Fatal(err)
		}
		if got := readBack(t, a); !got.Equal(want) {
			t.Fatalf("read back:\n%v\nwant\n%v", got, want)
		}
		// The chain and its one rule, as the kernel reports them.
		c, err := nftables.New(nftables.WithNetNSFd(fd))
		if err != nil {
			t.Fatal(err)
		}
		for _, v6 := range []bool{false, true} {
			o := a.objects(v6)
			ch, err := c.ListChain(o.table, ChainName)
			if err != nil {
				t.Fatal(err)
			}
			if ch.Type != nftables.ChainTypeNAT || ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookOutput ||
				ch.Priority == nil || *ch.Priority != *nftables.ChainPriorityNATDest {
				t.Errorf("%s chain: type %v hook %v priority %v, want nat output -100", family(o.table), ch.Type, ch.Hooknum, ch.Priority)
			}
			rules, err := c.GetRules(o.table, ch)
			if err != nil {
				t.Fatal(err)
			}
			if len(rules) != 1 {
				t.Fatalf("%s: %d rules, want 1", family(o.table), len(rules))
			}
			got := rules[0].Exprs
			exp := o.ruleExprs()
			if len(got) != len(exp) {
				t.Fatalf("%s rule: %d expressions, want %d", family(o.table), len(got), len(exp))
			}
			for i := range got {
				if l, ok := got[i].(*expr.Lookup); ok {
					l.SetID = exp[i].(*expr.Lookup).SetID // ids are per batch
				}
				if n, ok := exp[i].(*expr.NAT); ok {
					// The kernel reports the maximum registers equal to the
					// minimum ones and the range as proto-specified.
					n.RegAddrMax, n.RegProtoMax, n.Specified = n.RegAddrMin, n.RegProtoMin, true
				}
				if !reflect.DeepEqual(got[i], exp[i]) {
					t.Errorf("%s rule expression %d: %#v, want %#v", family(o.table), i, got[i], exp[i])
				}
			}
		}
		requireNft(t, ns, "ip", DefaultTable,
			"type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service",
			"type nat hook output priority -100; policy accept;",
			"dnat ip to ip daddr . meta l4proto . th dport map @services",
			"172.30.0.11 . tcp . 30080 : 10.96.0.10 . 80",
			"172.30.0.11 . udp . 30053 : 10.96.0.10 . 53",
			"172.30.0.11 . sctp . 31999 : 10.96.0.10 . 9999",
			"172.30.0.200 . tcp . 80 : 10.96.0.10 . 80",
			"172.30.0.201 . udp . 53 : 10.96.0.10 . 53")
		requireNft(t, ns, "ip6", DefaultTable,
			"type ipv6_addr . inet_proto . inet_service : ipv6_addr . inet_service",
			"dnat ip6 to ip6 daddr . meta l4proto . th dport map @services",
			"fd00:172:30::11 . tcp . 30080 : fd00:10:96::a . 80",
			"fd00:172:30::200 . tcp . 80 : fd00:10:96::a . 80",
			"fd00:172:30::11 . sctp . 31999 : fd00:10:96::a . 9999")
	})

	t.Run("incremental", func(t *testing.T) {
		// Another node port for b, c gone, a new external IP for a.
		next, _ := Build([]netip.Addr{node4, node6}, []Port{
			{Name: "a", Protocol: ProtoTCP, Port: 80, NodePort: 30080, ClusterIPs: []netip.Addr{cip4, cip6}, ExternalIPs: []netip.Addr{ext4, ext6, lb4}},
			{Name: "b", Protocol: ProtoUDP, Port: 53, NodePort: 30054, ClusterIPs: []netip.Addr{cip4}, LoadBalancerIPs: []netip.Addr{lb4}},
		})
		if err := a.Apply(next); err != nil {
			t.Fatal(err)
		}
		if got := readBack(t, a); !got.Equal(next) {
			t.Fatalf("read back:\n%v\nwant\n%v", got, next)
		}
		out, err := nftList(t, ns, "ip", DefaultTable)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "30053") || strings.Contains(out, "sctp") {
			t.Errorf("stale elements left:\n%s", out)
		}
		requireNft(t, ns, "ip", DefaultTable, "172.30.0.11 . udp . 30054 : 10.96.0.10 . 53", "172.30.0.201 . tcp . 80 : 10.96.0.10 . 80")
		// An update to the same content sends nothing and changes nothing.
		if err := a.Apply(next); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("apply after the table was deleted behind its back", func(t *testing.T) {
		needNft(t)
		if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "ip", DefaultTable).CombinedOutput(); err != nil {
			t.Fatalf("nft delete table: %v: %s", err, out)
		}
		if err := a.Apply(want); err != nil {
			t.Fatalf("Apply (must fall back to a replace): %v", err)
		}
		if got := readBack(t, a); !got.Equal(want) {
			t.Fatalf("read back:\n%v\nwant\n%v", got, want)
		}
		// The other family's table, with a change that touches only IPv4
		// elements: still found missing, and replaced.
		if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "ip6", DefaultTable).CombinedOutput(); err != nil {
			t.Fatalf("nft delete table: %v: %s", err, out)
		}
		want.V4 = want.V4[1:]
		if err := a.Apply(want); err != nil {
			t.Fatalf("Apply (must fall back to a replace): %v", err)
		}
		if got := readBack(t, a); !got.Equal(want) {
			t.Fatalf("read back:\n%v\nwant\n%v", got, want)
		}
	})

	t.Run("replace over foreign content", func(t *testing.T) {
		needNft(t)
		cmd := exec.Command("ip", "netns", "exec", ns, "nft", "add", "element", "ip", DefaultTable, MapName,
			"{ 1.2.3.4 . tcp . 1 : 10.96.0.1 . 1 }")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft add element: %v: %s", err, out)
		}
		fresh := NewApplier(Options{NetNS: fd}) // a restarted agent
		if err := fresh.Apply(want); err != nil {
			t.Fatal(err)
		}
		if got := readBack(t, fresh); !got.Equal(want) {
			t.Fatalf("read back:\n%v\nwant\n%v", got, want)
		}
	})

	// More elements than one netlink attribute can hold (its length is 16
	// bits): they must be split over several messages of one batch.
	t.Run("many ipv6 elements", func(t *testing.T) {
		var ports []Port
		for i := range 3000 {
			ports = append(ports, Port{Name: fmt.Sprint(i), Protocol: ProtoUDP, Port: 53, NodePort: uint16(20000 + i),
				ClusterIPs: []netip.Addr{netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 0, 0x96, 14: byte(i >> 8), 15: byte(i)})}})
		}
		many, _ := Build([]netip.Addr{node6}, ports)
		if err := a.Replace(many); err != nil {
			t.Fatal(err)
		}
		if got := readBack(t, a); !got.Equal(many) {
			t.Fatalf("read back %d rules, want %d", got.Len(), many.Len())
		}
	})

	t.Run("delete", func(t *testing.T) {
		if err := a.Delete(); err != nil {
			t.Fatal(err)
		}
		if _, found, err := a.Read(); err != nil || found {
			t.Fatalf("after Delete: found %v, %v", found, err)
		}
		if err := a.Delete(); err != nil {
			t.Fatalf("second Delete: %v", err)
		}
	})
}

// TestDNATInNamespace sends real connections through the tables: in a
// namespace where a local address plays the ClusterIP, a connection to the
// node IP's node port, to an external IP (TCP) and to a node port over UDP
// reaches the listener on the ClusterIP.
func TestDNATInNamespace(t *testing.T) {
	ns, fd := testNetns(t)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("link", "set", "lo", "up")
	for _, a := range []string{node4.String() + "/32", cip4.String() + "/32", ext4.String() + "/32"} {
		ip("addr", "add", a, "dev", "lo")
	}
	for _, a := range []string{node6.String() + "/128", cip6.String() + "/128"} {
		ip("addr", "add", a, "dev", "lo", "nodad")
	}
	rs, _ := Build([]netip.Addr{node4, node6}, []Port{
		{Name: "a", Protocol: ProtoTCP, Port: 80, NodePort: 30080, ClusterIPs: []netip.Addr{cip4, cip6}, ExternalIPs: []netip.Addr{ext4}},
		{Name: "b", Protocol: ProtoUDP, Port: 53, NodePort: 30053, ClusterIPs: []netip.Addr{cip4, cip6}},
	})
	if err := NewApplier(Options{NetNS: fd}).Replace(rs); err != nil {
		t.Fatal(err)
	}
	path := "/run/netns/" + ns
	var lns []net.Listener
	var pcs []net.PacketConn
	if err := nsrun.Do(path, func() error {
		for _, c := range []netip.Addr{cip4, cip6} {
			l, err := net.Listen("tcp", netip.AddrPortFrom(c, 80).String())
			if err != nil {
				return err
			}
			lns = append(lns, l)
			pc, err := net.ListenPacket("udp", netip.AddrPortFrom(c, 53).String())
			if err != nil {
				return err
			}
			pcs = append(pcs, pc)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, l := range lns {
		defer l.Close()
		go func(l net.Listener) {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = io.WriteString(c, c.LocalAddr().String())
				c.Close()
			}
		}(l)
	}
	for _, pc := range pcs {
		defer pc.Close()
		go func(pc net.PacketConn) {
			buf := make([]byte, 64)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo([]byte(pc.LocalAddr().String()), from)
			}
		}(pc)
	}
	dial := func(network string, dst netip.AddrPort) (string, error) {
		var conn net.Conn
		err := nsrun.Do(path, func() error {
			var err error
			conn, err = net.DialTimeout(network, dst.String(), 2*time.Second)
			return err
		})
		if err != nil {
			return "", err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if network == "udp" {
			if _, err := conn.Write([]byte("hi")); err != nil {
				return "", err
			}
		}
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		if err != nil && n == 0 {
			return "", err
		}
		return string(buf[:n]), nil
	}
	tests := []struct {
		network string
		dst     netip.AddrPort
		want    netip.AddrPort
	}{
		{"tcp", netip.AddrPortFrom(node4, 30080), netip.AddrPortFrom(cip4, 80)},
		{"tcp", netip.AddrPortFrom(node6, 30080), netip.AddrPortFrom(cip6, 80)},
		{"tcp", netip.AddrPortFrom(ext4, 80), netip.AddrPortFrom(cip4, 80)},
		{"udp", netip.AddrPortFrom(node4, 30053), netip.AddrPortFrom(cip4, 53)},
		{"udp", netip.AddrPortFrom(node6, 30053), netip.AddrPortFrom(cip6, 53)},
	}
	for _, tt := range tests {
		t.Run(tt.network+"/"+tt.dst.String(), func(t *testing.T) {
			got, err := dial(tt.network, tt.dst)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want.String() {
				t.Errorf("answered by %s, want the listener on %s", got, tt.want)
			}
		})
	}
	// Not a rule's port: no DNAT, nothing listens, refused.
	if _, err := dial("tcp", netip.AddrPortFrom(node4, 30081)); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("dial %s:30081: %v, want connection refused", node4, err)
	}
}

// BenchmarkHostNAT10k replaces the tables with the rules of 10,000
// services (each with a node port on a dual-stack node, one in four also
// with an external IP: 25,000 map elements), in one transaction, and
// compares with `nft -f` loading the same content.
func BenchmarkHostNAT10k(b *testing.B) {
	ns, fd := testNetns(b)
	var ports []Port
	for i := range 10000 {
		p := Port{Name: fmt.Sprintf("ns/svc%05d:p/TCP", i), Protocol: ProtoTCP, Port: 80, NodePort: uint16(20000 + i%40000),
			ClusterIPs: []netip.Addr{
				netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}),
				netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 0, 0x96, 14: byte(i >> 8), 15: byte(i)}),
			}}
		if i%2 == 1 {
			p.Protocol = ProtoUDP
		}
		if i%4 == 0 {
			p.ExternalIPs = []netip.Addr{netip.AddrFrom4([4]byte{172, 31, byte(i >> 8), byte(i)})}
		}
		ports = append(ports, p)
	}
	rs, conflicts := Build([]netip.Addr{node4, node6}, ports)
	if len(conflicts) != 0 {
		b.Fatalf("%d conflicts: %v", len(conflicts), conflicts[0])
	}
	a := NewApplier(Options{NetNS: fd})
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := a.Replace(rs); err != nil {
			b.Fatal(err)
		}
	}
	ours := time.Since(start) / time.Duration(b.N)
	b.StopTimer()
	got, _, err := a.Read()
	if err != nil || !got.Equal(rs) {
		b.Fatalf("read back %d rules (%v), want %d", got.Len(), err, rs.Len())
	}
	b.ReportMetric(float64(rs.Len()), "rules")
	b.ReportMetric(float64(ours.Microseconds())/1000, "ms/replace")

	// The reference: nft -f with the same tables.
	needNft(b)
	var sb strings.Builder
	for _, v6 := range []bool{false, true} {
		fam, at := "ip", "ipv4_addr"
		if v6 {
			fam, at = "ip6", "ipv6_addr"
		}
		fmt.Fprintf(&sb, "table %s nft_ref {}\ndelete table %s nft_ref\ntable %s nft_ref {\n map services {\n  type %s . inet_proto . inet_service : %s . inet_service\n", fam, fam, fam, at, at)
		if rules := rs.Family(v6); len(rules) > 0 {
			sb.WriteString("  elements = {\n")
			for _, r := range rules {
				fmt.Fprintf(&sb, "   %s,\n", r)
			}
			sb.WriteString("  }\n")
		}
		fmt.Fprintf(&sb, " }\n chain output {\n  type nat hook output priority -100; policy accept;\n  dnat %s to %s daddr . meta l4proto . th dport map @services\n }\n}\n", fam, fam)
	}
	file := b.TempDir() + "/ref.nft"
	if err := os.WriteFile(file, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	const refRuns = 3
	start = time.Now()
	for range refRuns {
		if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "-f", file).CombinedOutput(); err != nil {
			b.Fatalf("nft -f: %v: %s", err, out)
		}
	}
	ref := time.Since(start) / refRuns
	b.ReportMetric(float64(ref.Microseconds())/1000, "ms/nft-f")
	b.ReportMetric(float64(ref)/float64(ours), "nft-f/ours")
}

// BenchmarkHostNAT10kOneChange changes one service's node port on top of
// 10,000 services: an element delete and add in one transaction.
func BenchmarkHostNAT10kOneChange(b *testing.B) {
	ns, fd := testNetns(b)
	var ports []Port
	for i := range 10000 {
		ports = append(ports, Port{Name: fmt.Sprintf("ns/svc%05d:p/TCP", i), Protocol: ProtoTCP, Port: 80, NodePort: uint16(20000 + i),
			ClusterIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})}})
	}
	base, _ := Build([]netip.Addr{node4}, ports)
	ports[0].NodePort = 40000
	changed, _ := Build([]netip.Addr{node4}, ports)
	a := NewApplier(Options{NetNS: fd})
	if err := a.Replace(base); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		next := changed
		if i%2 == 1 {
			next = base
		}
		if err := a.Apply(next); err != nil {
			b.Fatal(err)
		}
	}
	ours := b.Elapsed() / time.Duration(b.N)
	b.StopTimer()
	b.ReportMetric(float64(ours.Microseconds())/1000, "ms/change")

	// The reference: nft -f with the same element change, on a copy of
	// the table.
	needNft(b)
	var sb strings.Builder
	sb.WriteString("table ip nft_ref {\n map services {\n  type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service\n  elements = {\n")
	for _, r := range base.V4 {
		fmt.Fprintf(&sb, "   %s,\n", r)
	}
	sb.WriteString("  }\n }\n}\n")
	dir := b.TempDir()
	files := []string{dir + "/base.nft", dir + "/to-changed.nft", dir + "/to-base.nft"}
	add, del := Diff(base.V4, changed.V4)
	change := func(del, add []Rule) string {
		var c strings.Builder
		for _, r := range del {
			fmt.Fprintf(&c, "delete element ip nft_ref services { %s }\n", r.Key)
		}
		for _, r := range add {
			fmt.Fprintf(&c, "add element ip nft_ref services { %s }\n", r)
		}
		return c.String()
	}
	for i, content := range []string{sb.String(), change(del, add), change(add, del)} {
		if err := os.WriteFile(files[i], []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	nft := func(file string) {
		if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "-f", file).CombinedOutput(); err != nil {
			b.Fatalf("nft -f %s: %v: %s", file, err, out)
		}
	}
	nft(files[0])
	const refRuns = 10
	start := time.Now()
	for i := range refRuns {
		nft(files[1+i%2])
	}
	ref := time.Since(start) / refRuns
	b.ReportMetric(float64(ref.Microseconds())/1000, "ms/nft-f")
	b.ReportMetric(float64(ref)/float64(ours), "nft-f/ours")
}
