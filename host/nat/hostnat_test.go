package nat

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

var (
	node4  = netip.MustParseAddr("172.30.0.11")
	node6  = netip.MustParseAddr("fd00:172:30::11")
	cip4   = netip.MustParseAddr("10.96.0.10")
	cip6   = netip.MustParseAddr("fd00:10:96::a")
	ext4   = netip.MustParseAddr("172.30.0.200")
	ext6   = netip.MustParseAddr("fd00:172:30::200")
	lb4    = netip.MustParseAddr("172.30.0.201")
	mapped = netip.MustParseAddr("::ffff:172.30.0.202")
)

func r(daddr netip.Addr, proto uint8, port uint16, to netip.Addr, toPort uint16) Rule {
	return Rule{Key: Key{Daddr: daddr, Proto: proto, Port: port}, To: netip.AddrPortFrom(to, toPort)}
}

func TestBuild(t *testing.T) {
	nodes := []netip.Addr{node4, node6}
	tests := []struct {
		name      string
		nodeIPs   []netip.Addr
		ports     []Port
		want      Ruleset
		conflicts []string
	}{
		{name: "nothing"},
		{
			name:    "clusterip only: no rules",
			nodeIPs: nodes,
			ports:   []Port{{Name: "a", Protocol: ProtoTCP, Port: 80, ClusterIPs: []netip.Addr{cip4}}},
		},
		{
			name:    "nodeport, single stack: only the node IP of its family",
			nodeIPs: nodes,
			ports:   []Port{{Name: "a", Protocol: ProtoTCP, Port: 80, NodePort: 30080, ClusterIPs: []netip.Addr{cip4}}},
			want:    Ruleset{V4: []Rule{r(node4, ProtoTCP, 30080, cip4, 80)}},
		},
		{
			name:    "nodeport, dual stack: each family to its own ClusterIP",
			nodeIPs: nodes,
			ports:   []Port{{Name: "a", Protocol: ProtoUDP, Port: 53, NodePort: 30053, ClusterIPs: []netip.Addr{cip4, cip6}}},
			want: Ruleset{
				V4: []Rule{r(node4, ProtoUDP, 30053, cip4, 53)},
				V6: []Rule{r(node6, ProtoUDP, 30053, cip6, 53)},
			},
		},
		{
			name:    "several node IPs of a family",
			nodeIPs: []netip.Addr{node4, netip.MustParseAddr("192.168.1.5")},
			ports:   []Port{{Name: "a", Protocol: ProtoSCTP, Port: 9999, NodePort: 31999, ClusterIPs: []netip.Addr{cip4}}},
			want: Ruleset{V4: []Rule{
				r(node4, ProtoSCTP, 31999, cip4, 9999),
				r(netip.MustParseAddr("192.168.1.5"), ProtoSCTP, 31999, cip4, 9999),
			}},
		},
		{
			name:    "external and ingress IPs use the service port, per family",
			nodeIPs: nodes,
			ports: []Port{{Name: "a", Protocol: ProtoTCP, Port: 80, ClusterIPs: []netip.Addr{cip4, cip6},
				ExternalIPs: []netip.Addr{ext4, ext6}, LoadBalancerIPs: []netip.Addr{lb4}}},
			want: Ruleset{
				V4: []Rule{r(ext4, ProtoTCP, 80, cip4, 80), r(lb4, ProtoTCP, 80, cip4, 80)},
				V6: []Rule{r(ext6, ProtoTCP, 80, cip6, 80)},
			},
		},
		{
			name:    "external IP of a family without ClusterIP: skipped",
			nodeIPs: nodes,
			ports: []Port{{Name: "a", Protocol: ProtoTCP, Port: 80, NodePort: 30080, ClusterIPs: []netip.Addr{cip6},
				ExternalIPs: []netip.Addr{ext4, ext6}}},
			want: Ruleset{V6: []Rule{r(node6, ProtoTCP, 30080, cip6, 80), r(ext6, ProtoTCP, 80, cip6, 80)}},
		},
		{
			name:    "mapped IPv4 is IPv4; invalid, unspecified and the ClusterIP itself are skipped",
			nodeIPs: []netip.Addr{{}, netip.IPv4Unspecified()},
			ports: []Port{{Name: "a", Protocol: ProtoTCP, Port: 80, NodePort: 30080, ClusterIPs: []netip.Addr{cip4},
				ExternalIPs: []netip.Addr{mapped, cip4, {}}}},
			want: Ruleset{V4: []Rule{r(netip.MustParseAddr("172.30.0.202"), ProtoTCP, 80, cip4, 80)}},
		},
		{
			name:    "no ClusterIP: nothing",
			nodeIPs: nodes,
			ports:   []Port{{Name: "a", Protocol: ProtoTCP, Port: 80, NodePort: 30080, ExternalIPs: []netip.Addr{ext4}}},
		},
		{
			name:    "same port number, other protocols: no conflict",
			nodeIPs: []netip.Addr{node4},
			ports: []Port{
				{Name: "a/tcp", Protocol: ProtoTCP, Port: 80, NodePort: 30080, ClusterIPs: []netip.Addr{cip4}},
				{Name: "a/udp", Protocol: ProtoUDP, Port: 80, NodePort: 30080, ClusterIPs: []netip.Addr{cip4}},
			},
			want: Ruleset{V4: []Rule{r(node4, ProtoTCP, 30080, cip4, 80), r(node4, ProtoUDP, 30080, cip4, 80)}},
		},
		{
			name:    "two services want one external IP and port: the first by name keeps it",
			nodeIPs: []netip.Addr{node4},
			ports: []Port{
				{Name: "ns/z:http/TCP", Protocol: ProtoTCP, Port: 80, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.99")}, ExternalIPs: []netip.Addr{ext4}},
				{Name: "ns/a:http/TCP", Protocol: ProtoTCP, Port: 80, ClusterIPs: []netip.Addr{cip4}, ExternalIPs: []netip.Addr{ext4}},
			},
			want:      Ruleset{V4: []Rule{r(ext4, ProtoTCP, 80, cip4, 80)}},
			conflicts: []string{"hostnat: 172.30.0.200: tcp port 80 wanted by ns/z:http/TCP too; ns/a:http/TCP keeps it"},
		},
		{
			name:    "an external IP equal to the node IP on a node port: the first keeps it",
			nodeIPs: []netip.Addr{node4},
			ports: []Port{
				{Name: "a", Protocol: ProtoTCP, Port: 80, NodePort: 30080, ClusterIPs: []netip.Addr{cip4}},
				{Name: "b", Protocol: ProtoTCP, Port: 30080, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.99")}, ExternalIPs: []netip.Addr{node4}},
			},
			want:      Ruleset{V4: []Rule{r(node4, ProtoTCP, 30080, cip4, 80)}},
			conflicts: []string{"hostnat: 172.30.0.11: tcp port 30080 wanted by b too; a keeps it"},
		},
		{
			name:    "port 0: skipped",
			nodeIPs: []netip.Addr{node4},
			ports:   []Port{{Name: "a", Protocol: ProtoTCP, NodePort: 30080, ClusterIPs: []netip.Addr{cip4}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, conflicts := Build(tt.nodeIPs, tt.ports)
			if !got.Equal(tt.want) {
				t.Errorf("Build:\n got %v\nwant %v", got, tt.want)
			}
			var msgs []string
			for _, c := range conflicts {
				msgs = append(msgs, c.Error())
			}
			if !slices.Equal(msgs, tt.conflicts) {
				t.Errorf("conflicts:\n got %q\nwant %q", msgs, tt.conflicts)
			}
			// The input order does not matter.
			rev := slices.Clone(tt.ports)
			slices.Reverse(rev)
			if again, _ := Build(tt.nodeIPs, rev); !again.Equal(got) {
				t.Errorf("Build of the reversed ports: %v, want %v", again, got)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	a := r(node4, ProtoTCP, 30080, cip4, 80)
	b := r(node4, ProtoUDP, 30053, cip4, 53)
	b2 := r(node4, ProtoUDP, 30053, cip4, 54)
	c := r(ext4, ProtoTCP, 80, cip4, 80)
	tests := []struct {
		name           string
		old, want      []Rule
		wantAdd, wantD []Rule
	}{
		{name: "empty"},
		{name: "all new", want: []Rule{a, c}, wantAdd: []Rule{a, c}},
		{name: "all gone", old: []Rule{a, c}, wantD: []Rule{a, c}},
		{name: "same", old: []Rule{a, b, c}, want: []Rule{a, b, c}},
		{name: "one added, one removed", old: []Rule{a, c}, want: []Rule{a, b}, wantAdd: []Rule{b}, wantD: []Rule{c}},
		{name: "target changed: delete and add", old: []Rule{a, b}, want: []Rule{a, b2}, wantAdd: []Rule{b2}, wantD: []Rule{b}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			add, del := Diff(tt.old, tt.want)
			if !slices.Equal(add, tt.wantAdd) || !slices.Equal(del, tt.wantD) {
				t.Errorf("Diff: add %v del %v, want add %v del %v", add, del, tt.wantAdd, tt.wantD)
			}
		})
	}
}

func TestElementEncoding(t *testing.T) {
	tests := []struct {
		name     string
		rule     Rule
		key, val []byte
	}{
		{
			// nft --debug=netlink shows this element as
			// "0100000a 00000006 00008075 : 0a00600a 00005000" (host-order words).
			name: "ipv4",
			rule: r(netip.MustParseAddr("10.0.0.1"), ProtoTCP, 30080, netip.MustParseAddr("10.96.0.10"), 80),
			key:  []byte{10, 0, 0, 1, 6, 0, 0, 0, 0x75, 0x80, 0, 0},
			val:  []byte{10, 96, 0, 10, 0, 80, 0, 0},
		},
		{
			name: "ipv6",
			rule: r(netip.MustParseAddr("fd00::1"), ProtoUDP, 30080, netip.MustParseAddr("fd00:96::10"), 80),
			key:  append(netip.MustParseAddr("fd00::1").AsSlice(), 17, 0, 0, 0, 0x75, 0x80, 0, 0),
			val:  append(netip.MustParseAddr("fd00:96::10").AsSlice(), 0, 80, 0, 0),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if k := encodeKey(tt.rule.Key); !bytes.Equal(k, tt.key) {
				t.Errorf("key % x, want % x", k, tt.key)
			}
			if v := encodeVal(tt.rule.To); !bytes.Equal(v, tt.val) {
				t.Errorf("value % x, want % x", v, tt.val)
			}
			got, err := decodeElement(tt.rule.Daddr.Is6(), tt.key, tt.val)
			if err != nil || got != tt.rule {
				t.Errorf("decode: %v, %v; want %v", got, err, tt.rule)
			}
		})
	}
}

func TestDecodeElementErrors(t *testing.T) {
	tests := []struct {
		name     string
		v6       bool
		key, val []byte
		want     string
	}{
		{"short ipv4 key", false, make([]byte, 8), make([]byte, 8), "hostnat: ip map element: key of 8 bytes, want 12"},
		{"long ipv4 value", false, make([]byte, 12), make([]byte, 20), "hostnat: ip map element: value of 20 bytes, want 8"},
		{"ipv4 key in the ipv6 map", true, make([]byte, 12), make([]byte, 20), "hostnat: ip6 map element: key of 12 bytes, want 24"},
		{"nothing", true, nil, nil, "hostnat: ip6 map element: key of 0 bytes, want 24"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeElement(tt.v6, tt.key, tt.val)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestParseProto(t *testing.T) {
	for _, s := range []string{"TCP", "udp", "Sctp"} {
		p, err := ParseProto(s)
		if err != nil || ProtoName(p) != strings.ToLower(s) {
			t.Errorf("ParseProto(%q) = %d, %v", s, p, err)
		}
	}
	if _, err := ParseProto("ICMP"); err == nil || err.Error() != `hostnat: unsupported protocol "ICMP"` {
		t.Errorf("ParseProto(ICMP): %v", err)
	}
	if ProtoName(1) != "proto-1" {
		t.Errorf("ProtoName(1) = %s", ProtoName(1))
	}
}

// FuzzDecodeElement round-trips map elements: decode, encode, decode,
// compare; it never panics.
func FuzzDecodeElement(f *testing.F) {
	f.Add(false, []byte{10, 0, 0, 1, 6, 0, 0, 0, 0x75, 0x80, 0, 0}, []byte{10, 96, 0, 10, 0, 80, 0, 0})
	f.Add(true, append(netip.MustParseAddr("fd00::1").AsSlice(), 17, 0, 0, 0, 0x75, 0x80, 0, 0), append(netip.MustParseAddr("fd00:96::10").AsSlice(), 0, 80, 0, 0))
	f.Add(false, []byte{1, 2, 3}, []byte{})
	f.Fuzz(func(t *testing.T, v6 bool, key, val []byte) {
		r1, err := decodeElement(v6, key, val)
		if err != nil {
			return
		}
		r2, err := decodeElement(v6, encodeKey(r1.Key), encodeVal(r1.To))
		if err != nil {
			t.Fatalf("decode of the encoding of %v: %v", r1, err)
		}
		if r1 != r2 {
			t.Fatalf("round trip: %v, then %v", r1, r2)
		}
	})
}

func TestNewRuleset(t *testing.T) {
	r := func(d string, port uint16, to string) Rule {
		return Rule{Key: Key{Daddr: netip.MustParseAddr(d), Proto: ProtoTCP, Port: port}, To: netip.MustParseAddrPort(to)}
	}
	rs, dropped := NewRuleset([]Rule{
		r("172.18.0.3", 9000, "10.244.1.5:80"), r("127.0.0.1", 9000, "10.244.1.6:80"),
		r("fd00::3", 9000, "[fd00:10::5]:80"), r("172.18.0.3", 9000, "10.244.1.7:80"),
	})
	if len(rs.V4) != 2 || rs.V4[0].Daddr.String() != "127.0.0.1" || rs.V4[1].To.String() != "10.244.1.5:80" || len(rs.V6) != 1 {
		t.Errorf("ruleset %+v", rs)
	}
	if len(dropped) != 1 || dropped[0].To.String() != "10.244.1.7:80" {
		t.Errorf("dropped %v, want the second rule for 172.18.0.3 . tcp . 9000", dropped)
	}
}
