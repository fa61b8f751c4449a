package openflow

import (
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

func otPort() Port {
	return Port{
		No: 1, HWAddr: net.HardwareAddr{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}, Name: "p1",
		Config: PortConfigDown, State: PortStateLive,
		Curr: 0x840, CurrSpeed: 2500000, MaxSpeed: 10000000,
	}
}

func TestPortStatus(t *testing.T) {
	want := "ADD: 1(p1): addr:aa:bb:cc:dd:ee:ff\n     config:     PORT_DOWN\n     state:      LIVE\n     current:    10GB-FD COPPER\n     speed: 2500 Mbps now, 10000 Mbps max"
	for _, v := range []Version{Version13, Version15} {
		m := &PortStatus{Reason: PortAdded, Port: otPort()}
		b := otMarshal(t, v, m)
		if got := otOfpPrint(t, b); got != want {
			t.Errorf("%s ofp-print:\n got %q\nwant %q", v, got, want)
		}
		back := otUnmarshal[*PortStatus](t, b)
		if !reflect.DeepEqual(back, m) {
			t.Errorf("%s: decoded %+v, want %+v", v, back, m)
		}
	}
	// OF1.3 reference layout: reason, pad, 64-byte ofp_port.
	b := otMarshal(t, Version13, &PortStatus{Reason: PortModified, Port: otPort()})
	if len(b) != 80 {
		t.Errorf("OF1.3 port status is %d bytes, want 80", len(b))
	}
	if got := (Port{No: PortLocal, Name: "br0", HWAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1}}).String(); got != "LOCAL(br0): addr:02:00:00:00:00:01" {
		t.Errorf("Port.String() = %q", got)
	}
}

func TestPortDescReply(t *testing.T) {
	ports := []Port{otPort(), {No: PortLocal, HWAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1}, Name: "br0", Config: PortConfigDown, State: PortStateLinkDown}}
	for _, v := range []Version{Version13, Version15} {
		r, err := NewPortDescReply(v, ports)
		if err != nil {
			t.Fatal(err)
		}
		b := otMarshal(t, v, r)
		printed := otOfpPrint(t, b)
		for _, want := range []string{"1(p1): addr:aa:bb:cc:dd:ee:ff", "LOCAL(br0): addr:02:00:00:00:00:01", "speed: 2500 Mbps now, 10000 Mbps max"} {
			if !strings.Contains(printed, want) {
				t.Errorf("%s: ofp-print lacks %q:\n%s", v, want, printed)
			}
		}
		back, err := otUnmarshal[*MultipartReply](t, b).PortDesc()
		if err != nil || !reflect.DeepEqual(back, ports) {
			t.Errorf("%s: decoded %+v, %v", v, back, err)
		}
	}
}

func TestFlowRemoved(t *testing.T) {
	t.Run("OF1.3 reference capture", func(t *testing.T) {
		b := otHex(t, `
			040b 0040 00000000 | 0000000000000099 | 0007 01 02 | 00000001 001e8480 | 0000 0001
			0000000000000000 | 0000000000000000 | 0001000c 80000004 00000001 00000000`)
		m := otUnmarshal[*FlowRemoved](t, b)
		want := &FlowRemoved{Table: 2, Priority: 7, Cookie: 0x99, Match: NewMatch(InPort(1)), HardTimeout: 1,
			Reason: FlowRemovedHardTimeout, Duration: time.Second + 2*time.Millisecond}
		if !reflect.DeepEqual(m, want) {
			t.Errorf("decoded %+v, want %+v", m, want)
		}
		b2, err := Marshal(Version13, 0, m)
		if err != nil {
			t.Fatal(err)
		}
		otDiffHex(t, "re-encoded", b2, b)
	})
	m := &FlowRemoved{Table: 2, Priority: 7, Cookie: 0x99, Match: NewMatch(InPort(1)), HardTimeout: 1, Reason: FlowRemovedHardTimeout,
		Duration: 1002 * time.Millisecond, PacketCount: 3, ByteCount: 255, IdleTime: time.Second}
	for _, v := range []Version{Version13, Version15} {
		b := otMarshal(t, v, m)
		if got, want := otOfpPrint(t, b), "priority=7,in_port=1 reason=hard table_id=2 cookie:0x99 duration1.002s idle0 hard1 pkts3 bytes255"; got != want {
			t.Errorf("%s ofp-print:\n got %q\nwant %q", v, got, want)
		}
		back := otUnmarshal[*FlowRemoved](t, b)
		want := *m
		if v == Version13 {
			want.IdleTime = 0
		}
		if !reflect.DeepEqual(back, &want) {
			t.Errorf("%s: decoded %+v", v, back)
		}
		if got := back.String(); got != "priority=7,in_port=1 reason=hard table_id=2 cookie:0x99 duration1.002s idle0 hard1 pkts3 bytes255" {
			t.Errorf("String() = %q", got)
		}
	}
}
