package openflow

import (
	"net"
	"net/netip"
	"testing"
)

// TestFlowString checks Flow.String against lines that
// `ovs-ofctl -O OpenFlow15 dump-flows --no-stats` printed for the same flows
// on Open vSwitch 3.1.0 (TestFlowStatsLive repeats this against a live
// switch).
func TestFlowString(t *testing.T) {
	tests := []struct {
		name string
		flow Flow
		want string
	}{
		{"default priority is left out", Flow{Priority: DefaultPriority, Match: NewMatch(InPort(1)), Instructions: otApply(Output{Port: 2})},
			" in_port=1 actions=output:2"},
		{"priority 0, empty match", Flow{Priority: 0}, " priority=0 actions=drop"},
		{"cookie, table, timeouts, flag, importance", Flow{
			Cookie: 0xabc, Table: 1, IdleTimeout: 10, HardTimeout: 20, Flags: FlowSendFlowRem, Importance: 7, Priority: 100,
			Match:        NewMatch(EthType(EthTypeIPv4), IPv4Src(otIP("10.0.0.1"))),
			Instructions: otCTFlow().Instructions,
		}, " cookie=0xabc, table=1, idle_timeout=10, hard_timeout=20, send_flow_rem importance=7, priority=100,ip,nw_src=10.0.0.1 actions=ct(commit,zone=5,nat(dst=10.0.0.2:80)),resubmit(,10)"},
		{"all flags", Flow{
			Table: 2, Priority: 5, Flags: FlowCheckOverlap | FlowResetCounts | FlowNoPacketCounts | FlowNoByteCounts,
			Match:        NewMatch(EthType(EthTypeIPv4), IPProto(IPProtoTCP)),
			Instructions: otApply(Controller2{MaxLen: 0xffff, Reason: ControllerReasonAction, Userdata: []byte{1, 2, 3}}),
		}, " table=2, check_overlap reset_counts no_packet_counts no_byte_counts priority=5,tcp actions=controller(userdata=01.02.03)"},
		{"masked register, goto", Flow{Cookie: 1, Table: 3, Priority: 5, Match: NewMatch(Reg(0, 5, 0xff)), Instructions: []Instruction{GotoTable{Table: 4}}},
			" cookie=0x1, table=3, priority=5,reg0=0x5/0xff actions=goto_table:4"},
		{"default priority, empty match, table", Flow{Table: 4, Priority: DefaultPriority}, " table=4, actions=drop"},
		{"all-ones cookie, top priority", Flow{Cookie: ^uint64(0), Table: 5, Priority: 65535},
			" cookie=0xffffffffffffffff, table=5, priority=65535 actions=drop"},
		{"table 0, everything default", Flow{Priority: DefaultPriority}, " actions=drop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.flow.String(); got != tc.want {
				t.Errorf("String():\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestFlowKey(t *testing.T) {
	mac := net.HardwareAddr{0xaa, 0xbb, 0xcc, 0, 0, 1}
	base := Flow{Table: 3, Priority: 10, Match: NewMatch(EthType(EthTypeIPv4), IPv4Src(otIP("10.0.0.1")), Reg(1, 7, 0xffffffff))}
	same := []struct {
		name string
		flow Flow
	}{
		{"fields reordered", Flow{Table: 3, Priority: 10, Match: NewMatch(Reg(1, 7, 0xffffffff), IPv4Src(otIP("10.0.0.1")), EthType(EthTypeIPv4))}},
		{"exact reg spelled without mask", Flow{Table: 3, Priority: 10, Match: NewMatch(Reg(1, 7, 0xffffffff), IPv4Src(otIP("10.0.0.1")), EthType(EthTypeIPv4))}},
		{"ip as /32 prefix", Flow{Table: 3, Priority: 10, Match: NewMatch(EthType(EthTypeIPv4), IPv4SrcPrefix(netip.MustParsePrefix("10.0.0.1/32")), Reg(1, 7, 0xffffffff))}},
		{"different cookie and actions", Flow{Table: 3, Priority: 10, Cookie: 9, Instructions: otApply(Output{Port: 1}),
			Match: NewMatch(EthType(EthTypeIPv4), IPv4Src(otIP("10.0.0.1")), Reg(1, 7, 0xffffffff))}},
		{"extra wildcard field", Flow{Table: 3, Priority: 10, Match: NewMatch(EthType(EthTypeIPv4), IPv4Src(otIP("10.0.0.1")), Reg(1, 7, 0xffffffff), Reg(2, 0, 0))}},
	}
	for _, tc := range same {
		t.Run("equal/"+tc.name, func(t *testing.T) {
			if tc.flow.Key() != base.Key() {
				t.Errorf("Key() = %v, want %v", tc.flow.Key(), base.Key())
			}
		})
	}
	differ := []struct {
		name string
		flow Flow
	}{
		{"other table", Flow{Table: 4, Priority: 10, Match: base.Match}},
		{"other priority", Flow{Table: 3, Priority: 11, Match: base.Match}},
		{"other value", Flow{Table: 3, Priority: 10, Match: NewMatch(EthType(EthTypeIPv4), IPv4Src(otIP("10.0.0.2")), Reg(1, 7, 0xffffffff))}},
		{"masked", Flow{Table: 3, Priority: 10, Match: NewMatch(EthType(EthTypeIPv4), IPv4Src(otIP("10.0.0.1")), Reg(1, 7, 0xff))}},
		{"fewer fields", Flow{Table: 3, Priority: 10, Match: NewMatch(EthType(EthTypeIPv4), IPv4Src(otIP("10.0.0.1")))}},
	}
	for _, tc := range differ {
		t.Run("differ/"+tc.name, func(t *testing.T) {
			if tc.flow.Key() == base.Key() {
				t.Errorf("Key() of %v equals %v", tc.flow, base)
			}
		})
	}
	t.Run("NXM and OXM headers of one field", func(t *testing.T) {
		oxm := Flow{Match: NewMatch(EthSrc(mac))}
		nxm := Flow{Match: NewMatch(Field{Class: 0x0000, Field: 2, Value: mac})} // NXM_OF_ETH_SRC
		if oxm.Key() != nxm.Key() {
			t.Errorf("OXM eth_src key %v != NXM eth_src key %v", oxm.Key(), nxm.Key())
		}
	})
	t.Run("value bits outside the mask", func(t *testing.T) {
		a := Flow{Match: NewMatch(Field{Class: 0x0001, Field: 0, Value: []byte{0, 0, 0x12, 0x34}, Mask: []byte{0, 0, 0xff, 0}})}
		b := Flow{Match: NewMatch(Field{Class: 0x0001, Field: 0, Value: []byte{0, 0, 0x12, 0x00}, Mask: []byte{0, 0, 0xff, 0}})}
		if a.Key() != b.Key() {
			t.Errorf("keys differ: %v vs %v", a.Key(), b.Key())
		}
	})
	t.Run("usable as a map key", func(t *testing.T) {
		m := map[FlowKey]int{base.Key(): 1}
		if m[same[0].flow.Key()] != 1 {
			t.Error("lookup by an equal key failed")
		}
	})
}

func TestFlowMods(t *testing.T) {
	f := otCTFlow()
	f.IdleTimeout, f.HardTimeout, f.Flags = 5, 6, FlowSendFlowRem
	add := f.AddMod()
	if add.Command != FlowAdd || add.BufferID != NoBuffer || add.OutPort != PortAny || add.OutGroup != GroupAny {
		t.Errorf("AddMod() = %+v", add)
	}
	if got := add.Flow(); got.String() != f.String() {
		t.Errorf("AddMod().Flow() = %v, want %v", got, f)
	}
	mod := f.ModifyStrictMod()
	if mod.Command != FlowModifyStrict || mod.Cookie != 0 || mod.CookieMask != 0 || len(mod.Instructions) != 1 || mod.Table != 1 || mod.Priority != 100 {
		t.Errorf("ModifyStrictMod() = %+v", mod)
	}
	del := f.DeleteStrictMod()
	if del.Command != FlowDeleteStrict || del.Instructions != nil || del.CookieMask != 0 || del.Table != 1 || del.Priority != 100 || len(del.Match.Fields) != 2 {
		t.Errorf("DeleteStrictMod() = %+v", del)
	}
	stats := []FlowStats{{Flow: f, PacketCount: 3}}
	if got := FlowsFromStats(stats); len(got) != 1 || got[0].Key() != f.Key() || FlowFromStats(stats[0]).String() != f.String() {
		t.Errorf("FlowsFromStats = %v", got)
	}
}

func TestFlowKeyRegisters(t *testing.T) {
	regs := Flow{Match: NewMatch(Reg(2, 1, 0xffffffff), Reg(3, 0x10, 0xf0))}
	xreg := Flow{Match: NewMatch(XReg(1, 1<<32|0x10, 0xffffffff000000f0))}
	if regs.Key() != xreg.Key() {
		t.Errorf("reg2,reg3 key %v != xreg1 key %v", regs.Key(), xreg.Key())
	}
	xx := Flow{Match: NewMatch(XXReg(0, [16]byte{3: 1, 15: 2}, [16]byte{0xff, 0xff, 0xff, 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff}))}
	if want := (Flow{Match: NewMatch(Reg(0, 1, 0xffffffff), Reg(3, 2, 0xffffffff))}); xx.Key() != want.Key() {
		t.Errorf("xxreg0 key %v != reg0,reg3 key %v", xx.Key(), want.Key())
	}
}
