package openflow

import (
	"errors"
	"reflect"
	"testing"
)

func TestFlowMonitorRequest(t *testing.T) {
	tests := []struct {
		name  string
		req   *FlowMonitorRequest
		hex   string
		print string
	}{
		{"every flow, all events", NewFlowMonitorRequest(7, MonitorInitial|MonitorAdded|MonitorRemoved|MonitorModified|MonitorInstructions), `
			06 12 00 28 00000001 | 0010 0000 00000000
			00000007 ffffffff ffffffff | 001f ff 00 | 0001 0004 00000000`,
			"id=7 flags=initial,add,delete,modify,actions"},
		{"one table, a match, own changes", &FlowMonitorRequest{ID: 1, OutPort: 2, OutGroup: GroupAny, Flags: MonitorAdded | MonitorOnlyOwn, Table: 3,
			Match: NewMatch(InPort(1))}, "",
			"id=1 flags=add,own out_port=2 table=3 in_port=1"},
		{"cancel", &FlowMonitorRequest{ID: 7, OutPort: PortAny, OutGroup: GroupAny, Table: TableAll, Command: FlowMonitorDelete}, "",
			"id=7 command=delete"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			otCheckEncoding(t, Version15, tc.req, tc.hex, tc.print)
		})
	}
	if _, err := Marshal(Version13, 1, NewFlowMonitorRequest(1, MonitorAdded)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("OF1.3: %v, want ErrUnsupported", err)
	}
}

// TestFlowUpdates decodes updates Open vSwitch 3.1 sent to a monitor (see
// TestFlowMonitorLive) and encodes them back.
func TestFlowUpdates(t *testing.T) {
	captured := []string{
		// ovs-ofctl add-flow br0 'table=7,priority=99,cookie=0x77,ip,actions=drop'
		"061300380000000000100000000000000028000107000000000000630000000000000000000000770001000a80000a020800000000000000",
		// ovs-ofctl mod-flows br0 'table=7,ip,actions=output:1'
		"061300500000000000100000000000000040000307000000000000630000000000000000000000770001000a80000a020800000000000000000400180000000000000010000000010000000000000000",
		// ovs-ofctl del-flows br0 'table=7'
		"061300500000000000100000000000000040000207020000000000630000000000000000000000770001000a80000a020800000000000000000400180000000000000010000000010000000000000000",
	}
	want := []string{
		"ADDED cookie=0x77, table=7, priority=99,ip actions=drop",
		"MODIFIED cookie=0x77, table=7, priority=99,ip actions=output:1",
		"DELETED reason=delete cookie=0x77, table=7, priority=99,ip actions=output:1",
	}
	for i, h := range captured {
		b := otHex(t, h)
		r := otUnmarshal[*MultipartReply](t, b)
		u, err := r.FlowUpdates()
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		if len(u) != 1 {
			t.Fatalf("update %d: %d updates", i, len(u))
		}
		if got := u[0].String(); got != want[i] {
			t.Errorf("update %d:\n got %q\nwant %q", i, got, want[i])
		}
		again, err := NewFlowMonitorReply(Version15, u)
		if err != nil {
			t.Fatal(err)
		}
		otDiffHex(t, "re-encoded", otMarshal(t, Version15, again)[8:], b[8:])
	}
	short := []FlowUpdate{{Event: FlowUpdateAbbrev, Xid: 7}, {Event: FlowUpdatePaused}, {Event: FlowUpdateResumed}}
	r, err := NewFlowMonitorReply(Version15, short)
	if err != nil {
		t.Fatal(err)
	}
	b := otMarshal(t, Version15, r)
	if got, want := otOfpPrint(t, b), "event=ABBREV xid=0x7\n event=PAUSED\n event=RESUMED"; got != want {
		t.Errorf("ofp-print:\n got %q\nwant %q", got, want)
	}
	back, err := otUnmarshal[*MultipartReply](t, b).FlowUpdates()
	if err != nil || !reflect.DeepEqual(back, short) {
		t.Errorf("decoded %+v, %v", back, err)
	}
}
