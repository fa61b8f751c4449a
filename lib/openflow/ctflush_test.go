package openflow

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func TestCtFlushZone(t *testing.T) {
	b, err := Marshal(Version13, 1, &CtFlushZone{Zone: 5})
	if err != nil {
		t.Fatal(err)
	}
	otDiffHex(t, "encoding", b, otHex(t, "0404001800000001000023200000001d0000000000000005"))
	if got := otOfpPrint(t, b); got != "zone_id=5" {
		t.Errorf("ofp-print = %q", got)
	}
	if got := otUnmarshal[*CtFlushZone](t, otMarshal(t, Version15, &CtFlushZone{Zone: 64000})); got.Zone != 64000 {
		t.Errorf("decoded zone %d", got.Zone)
	}
	if _, _, err := Unmarshal(otHex(t, "0404001800000001000023200000001d0000000001000005")); !errors.Is(err, ErrMalformed) {
		t.Errorf("non-zero padding: %v", err)
	}
}

func TestCtFlush(t *testing.T) {
	zone := func(z uint16) *uint16 { return &z }
	tests := []struct {
		name  string
		msg   *CtFlush
		hex   string
		print string
	}{
		{"reference example: tcp orig tuple, zone 5", &CtFlush{Zone: zone(5), IPProto: 6, Orig: CtTuple{
			Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 1000, DstPort: 80}}, `
			04 04 00 68 00000001 00002320 00000020
			06 00 00 00 00 00 00 00                       # ip_proto 6, pad
			00 00 00 48 00 00 00 00                       # ORIG_TUPLE, len 72, 4 zero bytes
			00 00 00 14 00000000 00000000 0000ffff 0a000001 00000000  # SRC ::ffff:10.0.0.1 (+4 pad)
			00 01 00 14 00000000 00000000 0000ffff 0a000002 00000000  # DST ::ffff:10.0.0.2
			00 02 00 08 03 e8 00 00                       # SRC_PORT 1000
			00 03 00 08 00 50 00 00                       # DST_PORT 80
			00 02 00 08 00 05 00 00                       # ZONE_ID 5`,
			"zone=5 'ct_nw_src=10.0.0.1,ct_nw_dst=10.0.0.2,ct_tp_src=1000,ct_tp_dst=80,ct_nw_proto=6' 'ct_nw_src=::,ct_nw_dst=::,ct_tp_src=0,ct_tp_dst=0'"},
		// ofp-print shows "zone=0" when there is no zone property; the switch
		// flushes every zone then.
		{"everything", &CtFlush{}, "04 04 00 18 00000001 00002320 00000020 00 00 00 00 00 00 00 00",
			"zone=0 'ct_ipv6_src=::,ct_ipv6_dst=::,ct_tp_src=0,ct_tp_dst=0,ct_nw_proto=0' 'ct_ipv6_src=::,ct_ipv6_dst=::,ct_tp_src=0,ct_tp_dst=0'"},
		{"udp6 reply tuple, all zones", &CtFlush{IPProto: 17, Reply: CtTuple{Src: netip.MustParseAddr("fd00::1"), DstPort: 53}}, "",
			"zone=0 'ct_ipv6_src=::,ct_ipv6_dst=::,ct_tp_src=0,ct_tp_dst=0,ct_nw_proto=17' 'ct_ipv6_src=fd00::1,ct_ipv6_dst=::,ct_tp_src=0,ct_tp_dst=53'"},
		{"icmp", &CtFlush{Zone: zone(0), IPProto: 1, Orig: CtTuple{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), ICMPID: 7, ICMPType: 8}}, "",
			"zone=0 'ct_nw_src=10.0.0.1,ct_nw_dst=10.0.0.2,icmp_id=7,icmp_type=8,icmp_code=0,ct_nw_proto=1' 'ct_nw_src=::,ct_nw_dst=::,icmp_id=0,icmp_type=0,icmp_code=0'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := otMarshal(t, Version15, tc.msg)
			if tc.hex != "" {
				otDiffHex(t, "encoding", otMarshal(t, Version13, tc.msg), otHex(t, tc.hex))
			}
			if got := otOfpPrint(t, b); got != tc.print {
				t.Errorf("ofp-print:\n got %q\nwant %q", got, tc.print)
			}
			back := otUnmarshal[*CtFlush](t, b)
			if !reflect.DeepEqual(back, tc.msg) {
				t.Errorf("decoded %+v, want %+v", back, tc.msg)
			}
		})
	}
	if _, _, err := Unmarshal(otHex(t, "04 04 00 20 00000001 00002320 00000020 00 00 00 00 00 00 00 00 0009 0008 00000000")); !errors.Is(err, ErrMalformed) {
		t.Errorf("unknown property: %v, want ErrMalformed", err)
	}
}
