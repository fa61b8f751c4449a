package openflow

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestPacketOut(t *testing.T) {
	frame := otFrame(t)
	t.Run("OF1.3 reference capture", func(t *testing.T) {
		p := &PacketOut{InPort: PortController, Actions: []Action{Output{Port: PortTable}}, Data: frame}
		b, err := Marshal(Version13, 0x68, p)
		if err != nil {
			t.Fatal(err)
		}
		want := otHex(t, `
			04 0d 00 52 00 00 00 68   # hdr, len 82
			ff ff ff ff ff ff ff fd   # buffer_id none, in_port CONTROLLER
			00 10 00 00 00 00 00 00   # actions_len 16, pad
			00 00 00 10 ff ff ff f9   # OUTPUT TABLE
			00 00 00 00 00 00 00 00   # max_len 0 + pad`)
		want = append(want, frame...)
		otDiffHex(t, "encoding", b, want)
	})
	tests := []struct {
		name  string
		v     Version
		p     *PacketOut
		print string
	}{
		{"OF1.3 to table", Version13, &PacketOut{InPort: PortController, Actions: []Action{Output{Port: PortTable}}, Data: frame},
			"in_port=CONTROLLER actions=TABLE data_len=42"},
		{"OF1.5 to table", Version15, &PacketOut{InPort: PortController, Actions: []Action{Output{Port: PortTable}}, Data: frame},
			"in_port=CONTROLLER actions=TABLE data_len=42"},
		{"OF1.5 with metadata", Version15, &PacketOut{InPort: 3, Match: NewMatch(Reg(0, 5, 0xffffffff), TunnelID(0x64)),
			Actions: []Action{ResubmitTable(10)}, Data: frame},
			"reg0=0x5,tun_id=0x64,in_port=3 actions=resubmit(,10) data_len=42"},
		{"OF1.5 no actions", Version15, &PacketOut{InPort: PortAny, Data: frame}, "in_port=ANY actions=drop data_len=42"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := otMarshal(t, tc.v, tc.p)
			got := otOfpPrint(t, b)
			if first, _, _ := strings.Cut(got, "\n"); first != tc.print {
				t.Errorf("ofp-print:\n got %q\nwant %q", got, tc.print)
			}
			if !strings.Contains(got, "udp,vlan_tci=0x0000,dl_src=00:00:00:00:00:01,dl_dst=00:00:00:00:00:02,nw_src=10.0.0.1,nw_dst=10.0.0.2") {
				t.Errorf("ofp-print did not see the frame: %q", got)
			}
			back := otUnmarshal[*PacketOut](t, b)
			if back.InPort != tc.p.InPort || !reflect.DeepEqual(back.Data, tc.p.Data) || ActionsString(back.Actions) != ActionsString(tc.p.Actions) ||
				len(back.Match.Fields) != len(tc.p.Match.Fields) {
				t.Errorf("decoded %+v, want %+v", back, tc.p)
			}
			otDiffHex(t, "re-encoded", otMarshal(t, tc.v, back), b)
		})
	}
	errs := []struct {
		name string
		v    Version
		p    *PacketOut
		want error
	}{
		{"match in OF1.3", Version13, &PacketOut{InPort: 1, Match: NewMatch(Reg(0, 1, 0xffffffff))}, ErrUnsupported},
		{"in_port in the match", Version15, &PacketOut{InPort: 1, Match: NewMatch(InPort(2))}, ErrMalformed},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Marshal(tc.v, 1, tc.p); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "packet out") {
				t.Errorf("Marshal: %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("buffered packet-out", func(t *testing.T) {
		b := otHex(t, "040d 0018 00000001 00000005 fffffffd 0000 000000000000")
		if _, _, err := Unmarshal(b); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Unmarshal: %v, want ErrUnsupported", err)
		}
	})
}
