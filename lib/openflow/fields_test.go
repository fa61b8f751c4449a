package openflow

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// TestFieldRegistry checks that the registry is consistent: every header
// and name leads back to its field.
func TestFieldRegistry(t *testing.T) {
	all := RegisteredFields()
	if len(all) < 90 {
		t.Fatalf("registry has %d fields", len(all))
	}
	for _, info := range all {
		if info.ID() != info.Headers[0] {
			t.Errorf("%s: ID %v, first header %v", info.Name, info.ID(), info.Headers[0])
		}
		nxmListed := false
		for _, h := range info.Headers {
			got, ok := LookupField(h.Class, h.Field, h.Experimenter)
			if !ok || got.Name != info.Name {
				t.Errorf("%s: LookupField(%v) = %q, %v", info.Name, h, got.Name, ok)
			}
			if h == info.NXM {
				nxmListed = true
			}
		}
		if !nxmListed {
			t.Errorf("%s: NXM header %v not among its headers", info.Name, info.NXM)
		}
		for _, n := range append([]string{info.Name, info.NXMName, strings.ToUpper(info.Name), strings.ToLower(info.NXMName)}, info.Aliases...) {
			if got, ok := FieldByName(n); !ok || got.Name != info.Name {
				t.Errorf("%s: FieldByName(%q) = %q, %v", info.Name, n, got.Name, ok)
			}
		}
		if info.Bits < 1 || info.Bits > 8*info.Bytes {
			t.Errorf("%s: %d bits in %d bytes", info.Name, info.Bits, info.Bytes)
		}
		f := info.Make(make([]byte, info.Bytes), nil)
		if f.Class != info.Class || f.Field != info.Field || f.Experimenter != info.Experimenter || f.Mask != nil {
			t.Errorf("%s: Make gave %+v", info.Name, f)
		}
	}
	// The experimenter id matters only for class 0xffff.
	if info, ok := LookupField(0x8000, 4, 0x1234); !ok || info.Name != "eth_src" {
		t.Errorf("LookupField with a stray experimenter id: %q, %v", info.Name, ok)
	}
	if _, ok := LookupField(0xffff, 42, ExperimenterNicira); ok {
		t.Error("tcp_flags found under the Nicira experimenter")
	}
	for _, c := range []struct{ name, want string }{
		{"dl_src", "eth_src"}, {"NXM_OF_ETH_SRC", "eth_src"}, {"OXM_OF_ETH_SRC", "eth_src"},
		{"nw_dst", "ip_dst"}, {"OXM_OF_IPV4_DST", "ip_dst"}, {"NXM_OF_IP_DST", "ip_dst"},
		{"tp_dst", "tcp_dst"}, {"tunnel_id", "tun_id"}, {"NXM_NX_TUN_ID", "tun_id"},
		{"NXM_NX_REG0", "reg0"}, {"NXM_NX_XXREG3", "xxreg3"}, {"OXM_OF_PKT_REG7", "xreg7"},
		{"NXM_NX_CT_MARK", "ct_mark"}, {"ONFOXM_ET_TCP_FLAGS", "tcp_flags"}, {"ip_proto", "nw_proto"},
		{"OXM_OF_METADATA", "metadata"}, {"in_port", "in_port"}, {"OXM_OF_IN_PORT", "in_port_oxm"},
	} {
		if got, ok := FieldByName(c.name); !ok || got.Name != c.want {
			t.Errorf("FieldByName(%q) = %q, %v; want %q", c.name, got.Name, ok, c.want)
		}
	}
	if _, ok := FieldByName("no_such_field"); ok {
		t.Error("FieldByName found no_such_field")
	}
}

// mxPrereq gives a match that satisfies a field's prerequisites.
func mxPrereq(info FieldInfo) string {
	switch info.Name {
	case "ct_nw_src", "ct_nw_dst":
		return "ip,ct_state=+trk+est,"
	case "ct_ipv6_src", "ct_ipv6_dst":
		return "ipv6,ct_state=+trk+est,"
	}
	return map[string]string{
		"": "", "Ethernet": "", "VLAN VID": "dl_vlan=1,", "MPLS": "mpls,", "IPv4": "ip,", "IPv6": "ipv6,",
		"IPv4/IPv6": "ip,", "TCP": "tcp,", "UDP": "udp,", "SCTP": "sctp,", "ICMPv4": "icmp,", "ICMPv6": "icmp6,",
		"ND": "icmp6,icmp_type=135,", "ND solicit": "icmp6,icmp_type=135,", "ND advert": "icmp6,icmp_type=136,",
		"ARP": "arp,", "CT": "ct_state=+trk+est,",
	}[info.Prerequisite]
}

// TestFieldNamesOracle checks each field's NXMName, Bits and NXM header
// against what ovs-ofctl prints and encodes for
// "move:<name>[]->NXM_NX_XXREG0[0..bits-1]" in OpenFlow 1.3.
func TestFieldNamesOracle(t *testing.T) {
	otNeedOfctl(t)
	var infos []FieldInfo
	var flows []string
	for _, info := range RegisteredFields() {
		dst := fmt.Sprintf("NXM_NX_XXREG0[0..%d]", info.Bits-1)
		if info.Bits == 1 {
			dst = "NXM_NX_XXREG0[0]"
		}
		infos = append(infos, info)
		flows = append(flows, fmt.Sprintf("%sactions=move:%s[]->%s", mxPrereq(info), info.Name, dst))
	}
	ovs := mxParseFlowLines(t, Version13, flows)
	for i, info := range infos {
		t.Run(info.Name, func(t *testing.T) {
			o := ovs[i]
			dst := strings.TrimPrefix(flows[i][strings.Index(flows[i], "->"):], "->")
			if info.Bits == 128 {
				dst = "NXM_NX_XXREG0[]" // the whole destination
			}
			if want := "move:" + info.NXMName + "[]->" + dst; !strings.Contains(o.text, want) {
				t.Errorf("ovs-ofctl printed %q, want it to contain %q", o.text, want)
			}
			// NXAST_REG_MOVE after the flow mod, match and APPLY_ACTIONS header:
			//	2+2+4+2 bytes: type 0xffff, len, Nicira, subtype 6
			//	2 bytes: n_bits
			//	2+2 bytes: src_ofs, dst_ofs
			//	src header (4 bytes, 8 for experimenter fields), dst header
			mlen := int(binary.BigEndian.Uint16(o.msg[50:]))
			act := o.msg[48+mlen+pad8(mlen)+8:]
			if nbits := int(binary.BigEndian.Uint16(act[10:])); nbits != info.Bits {
				t.Errorf("n_bits %d, Bits %d", nbits, info.Bits)
			}
			hdr := binary.BigEndian.Uint32(act[16:])
			got := FieldID{Class: uint16(hdr >> 16), Field: uint8(hdr>>9) & 0x7f}
			n := int(hdr & 0xff)
			if got.Class == ClassExperimenter {
				got.Experimenter = binary.BigEndian.Uint32(act[20:])
				n -= 4
			}
			if got != info.NXM || n != info.Bytes {
				t.Errorf("ovs-ofctl encoded the source as %v (%d bytes), NXM is %v (%d bytes)", got, n, info.NXM, info.Bytes)
			}
		})
	}
}

// TestFormatFieldValueOracle has ovs-ofctl encode set_field actions in
// OpenFlow 1.5 (where they may be masked), decodes the field with
// UnmarshalOXM, and checks FormatFieldValue and the name against the text
// ovs-ofctl prints, and AppendOXM against its bytes.
func TestFormatFieldValueOracle(t *testing.T) {
	otNeedOfctl(t)
	cases := []struct{ match, name, value string }{
		{"", "reg0", "0x5"},
		{"", "reg0", "0"},
		{"", "reg7", "0x1/0x1"},
		{"", "reg15", "0/0xff"},
		{"", "xreg1", "0x100000002"},
		{"", "xxreg2", "0x12345678901234567890/0xffffffffffffffffffff"},
		{"", "metadata", "0x1234"},
		{"", "pkt_mark", "0x1/0x3"},
		{"ip,", "ip_dst", "10.0.0.1"},
		{"ip,", "ip_src", "10.0.0.0/8"},
		{"ip,", "ip_src", "10.0.0.0/255.0.255.0"},
		{"", "eth_src", "0a:58:0a:80:00:01"},
		{"", "eth_dst", "0a:58:00:00:00:00/ff:ff:00:00:00:00"},
		{"ipv6,", "ipv6_src", "fe80::1"},
		{"ipv6,", "ipv6_dst", "fe80::/64"},
		{"ipv6,", "ipv6_dst", "::1.2.3.4"},
		{"ipv6,", "ipv6_dst", "::ffff:1.2.3.4"},
		{"ipv6,", "ipv6_label", "0x5"},
		{"", "tun_id", "0x5"},
		{"", "tun_id", "0"},
		{"", "tun_dst", "1.1.1.1"},
		{"", "tun_src", "10.0.0.0/8"},
		{"", "tun_ipv6_dst", "2001:db8::1"},
		{"", "tun_flags", "oam"},
		{"", "tun_flags", "0"},
		{"", "tun_gbp_id", "5"},
		{"", "tun_gbp_flags", "0x3"},
		{"tcp,", "tcp_dst", "80"},
		{"tcp,", "tcp_src", "80/0xff"},
		{"udp,", "udp_src", "53"},
		{"sctp,", "sctp_dst", "9"},
		{"dl_vlan=1,", "vlan_vid", "4101"},
		{"dl_vlan=1,", "vlan_pcp", "3"},
		{"", "vlan_tci", "0x5"},
		{"ip,", "ip_dscp", "4"},
		{"ip,", "nw_tos", "16"},
		{"ip,", "nw_ecn", "1"},
		{"ip,", "nw_ttl", "5"},
		{"arp,", "arp_op", "2"},
		{"arp,", "arp_spa", "10.0.0.1"},
		{"arp,", "arp_tha", "00:11:22:33:44:55"},
		{"icmp,", "icmp_type", "3"},
		{"icmp,", "icmp_code", "1"},
		{"icmp6,", "icmpv6_type", "128"},
		{"icmp6,icmp_type=135,", "nd_target", "::1"},
		{"icmp6,icmp_type=135,", "nd_sll", "00:00:00:00:00:01"},
		{"mpls,", "mpls_label", "5"},
		{"mpls,", "mpls_tc", "2"},
		{"mpls,", "mpls_ttl", "9"},
		{"", "in_port", "LOCAL"},
		{"", "in_port", "7"},
	}
	var flows []string
	for _, c := range cases {
		flows = append(flows, fmt.Sprintf("%sactions=set_field:%s->%s", c.match, c.value, c.name))
	}
	ovs := mxParseFlowLines(t, Version15, flows)
	for i, c := range cases {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			o := ovs[i]
			j := strings.Index(o.text, "actions=set_field:")
			if j < 0 {
				t.Fatalf("ovs-ofctl printed %q", o.text)
			}
			want := strings.TrimSuffix(o.text[j+len("actions=set_field:"):], " ")
			// OFPAT_SET_FIELD after the flow mod, match and APPLY_ACTIONS
			// header: type 25 (2 bytes), len (2 bytes), OXM TLV, padding.
			mlen := int(binary.BigEndian.Uint16(o.msg[50:]))
			act := o.msg[48+mlen+pad8(mlen)+8:]
			if typ := binary.BigEndian.Uint16(act); typ != 25 {
				t.Fatalf("action type %d, want set_field", typ)
			}
			f, n, err := UnmarshalOXM(act[4:binary.BigEndian.Uint16(act[2:])])
			if err != nil {
				t.Fatal(err)
			}
			info, ok := LookupField(f.Class, f.Field, f.Experimenter)
			if !ok {
				t.Fatalf("field %+v not in the registry", f)
			}
			if got := FormatFieldValue(f) + "->" + info.Name; got != want {
				t.Errorf("FormatFieldValue gives %q, ovs-ofctl %q", got, want)
			}
			b, err := AppendOXM(nil, f)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != string(act[4:4+n]) {
				t.Errorf("AppendOXM\n got %x\nwant %x", b, act[4:4+n])
			}
		})
	}
}
