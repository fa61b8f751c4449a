package openflow

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMultipartRequests(t *testing.T) {
	filtered := NewFlowStatsRequest()
	filtered.Table, filtered.Cookie, filtered.CookieMask = 3, 0x10, 0xff
	filtered.Match = NewMatch(InPort(1))
	tests := []struct {
		name  string
		v     Version
		req   Message
		hex   string
		print string
	}{
		{"all flows (reference capture)", Version13, NewFlowStatsRequest(), `
			04 12 00 38 00000001 | 0001 0000 00000000 | ff 000000 ffffffff ffffffff 00000000 |
			0000000000000000 | 0000000000000000 | 0001 0004 00000000`, ""},
		{"flows, filtered", Version15, filtered, "", "table=3 in_port=1"},
		{"group desc, all", Version15, &GroupDescRequest{GroupID: GroupAll}, "06 12 00 18 00000001 0007 0000 00000000 fffffffc 00000000", "group_id=ALL"},
		{"group desc OF1.3", Version13, &GroupDescRequest{GroupID: GroupAll}, "04 12 00 10 00000001 0007 0000 00000000", "group_id=ALL"},
		{"group stats", Version15, &GroupStatsRequest{GroupID: 5}, "", "group_id=5"},
		{"port desc, all", Version15, &PortDescRequest{PortNo: PortAny}, "06 12 00 18 00000001 000d 0000 00000000 ffffffff 00000000", "port=ANY"},
		{"port desc OF1.3", Version13, &PortDescRequest{PortNo: PortAny}, "04 12 00 10 00000001 000d 0000 00000000", "port=ANY"},
		{"meter config", Version13, &MeterConfigRequest{MeterID: MeterAll}, "04 12 00 18 00000001 000a 0000 00000000 ffffffff 00000000", "meter=all"},
		{"meter stats", Version15, &MeterStatsRequest{MeterID: 1}, "", "meter=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := otCheckEncoding(t, tc.v, tc.req, tc.hex, tc.print)
			r := otUnmarshal[*MultipartRequest](t, b)
			otDiffHex(t, "generic re-encoding", otMarshal(t, tc.v, r), b)
		})
	}
	if _, err := Marshal(Version13, 1, &GroupDescRequest{GroupID: 3}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("OF1.3 group desc of one group: %v", err)
	}
}

func TestMergeMultipartReplies(t *testing.T) {
	part := func(more bool, body ...byte) *MultipartReply {
		r := &MultipartReply{Version: Version15, Type: MultipartFlow, Body: body}
		if more {
			r.Flags = MultipartMore
		}
		return r
	}
	got, err := MergeMultipartReplies([]*MultipartReply{part(true, 1, 2), part(true), part(false, 3)})
	if err != nil || !reflect.DeepEqual(got, part(false, 1, 2, 3)) {
		t.Errorf("merge = %+v, %v", got, err)
	}
	bad := []struct {
		name  string
		parts []*MultipartReply
		text  string
	}{
		{"none", nil, "no parts"},
		{"last has more", []*MultipartReply{part(true)}, "last part 0 has the more flag"},
		{"middle lacks more", []*MultipartReply{part(false), part(false)}, "part 0 of 2 lacks the more flag"},
		{"mixed types", []*MultipartReply{part(true), {Version: Version15, Type: MultipartGroupDesc}}, "part 1 is OF1.5 group desc"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := MergeMultipartReplies(tc.parts)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("merge: %v, want %q", err, tc.text)
			}
		})
	}
	if _, err := part(false).GroupDesc(); !errors.Is(err, ErrMalformed) {
		t.Errorf("GroupDesc of a flow reply: %v", err)
	}
}

// TestFlowStatsReply encodes flow stats entries in both layouts, checks
// what ofp-print reads, and decodes them back.
func TestFlowStatsReply(t *testing.T) {
	ct := otCTFlow()
	stats := []FlowStats{
		{Flow: ct, Duration: 1500 * time.Millisecond, IdleTime: 2 * time.Second, PacketCount: 3, ByteCount: 300},
		{Flow: Flow{Priority: DefaultPriority, Match: NewMatch(InPort(1)), Instructions: otApply(Output{Port: 2})}},
	}
	for _, v := range []Version{Version13, Version15} {
		t.Run(v.String(), func(t *testing.T) {
			in := append([]FlowStats(nil), stats...)
			if v == Version13 {
				in[0].Importance, in[0].IdleTime = 0, 0
			}
			r, err := NewFlowStatsReply(v, in)
			if err != nil {
				t.Fatal(err)
			}
			b := otMarshal(t, v, r)
			printed := otOfpPrint(t, b)
			want0 := "cookie=0xabc, duration=1.500s, table=1, n_packets=3, n_bytes=300, "
			if v == Version15 {
				want0 += "importance=7, idle_age=2, "
			}
			want0 += "priority=100,ip,nw_src=10.0.0.1 actions=ct(commit,zone=5,nat(dst=10.0.0.2:80)),resubmit(,10)"
			if !strings.Contains(printed, want0) {
				t.Errorf("ofp-print lacks %q:\n%s", want0, printed)
			}
			back, err := otUnmarshal[*MultipartReply](t, b).FlowStats()
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != 2 || back[0].String() != in[0].String() || back[1].String() != in[1].String() ||
				back[0].Duration != in[0].Duration || back[0].IdleTime != in[0].IdleTime || back[0].PacketCount != 3 || back[0].ByteCount != 300 {
				t.Errorf("decoded %+v", back)
			}
		})
	}
}
