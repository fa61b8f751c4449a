package openflow

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// Tests in this file take Open vSwitch's own encoder and decoder as the
// reference: `ovs-ofctl -mmmmm parse-flow` gives the canonical bytes of a
// flow's instructions and the text ovs-ofctl prints for them, and
// `ovs-ofctl parse-actions` / `parse-instructions` decode and re-encode the
// bytes this package produces.

func actOfName(v Version) string {
	switch v {
	case Version13:
		return "OpenFlow13"
	case Version15:
		return "OpenFlow15"
	}
	panic(fmt.Sprintf("no ovs-ofctl name for %s", v))
}

var actHexWord = regexp.MustCompile(`^[0-9a-fA-F]+$`)

// actOracleFlow is what ovs-ofctl made of a flow: the text after "actions="
// and the encoded instruction list.
type actOracleFlow struct {
	text   string
	ins    []byte
	prefix []byte // the flow mod up to the instructions
}

// actParseFlow runs `ovs-ofctl -O VER -mmmmm parse-flow FLOW` and extracts the
// flow mod's instructions (after the 48-byte fixed part and the padded
// ofp_match) and the printed actions.
func actParseFlow(t testing.TB, v Version, flow string) actOracleFlow {
	t.Helper()
	out, err := exec.Command("ovs-ofctl", "-O", actOfName(v), "-mmmmm", "parse-flow", flow).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl parse-flow %q: %v\n%s", flow, err, out)
	}
	var res actOracleFlow
	var msg []byte
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "OFPT_FLOW_MOD") {
			_, after, ok := strings.Cut(line, " actions=")
			if !ok {
				t.Fatalf("no actions in %q", line)
			}
			res.text = after
			continue
		}
		if m := otHexdumpLine.FindStringSubmatch(line); m != nil {
			h := strings.NewReplacer(" ", "", "-", "").Replace(m[1])
			p, err := hex.DecodeString(h)
			if err != nil {
				t.Fatalf("hex dump line %q: %v", line, err)
			}
			msg = append(msg, p...)
		}
	}
	if len(msg) < 56 {
		t.Fatalf("parse-flow %q: short hex dump (%d bytes):\n%s", flow, len(msg), out)
	}
	mlen := int(binary.BigEndian.Uint16(msg[50:52]))
	off := 48 + mlen + pad8(mlen)
	if off > len(msg) || int(binary.BigEndian.Uint16(msg[2:4])) != len(msg) {
		t.Fatalf("parse-flow %q: bad message framing", flow)
	}
	res.ins = msg[off:]
	res.prefix = msg[:off]
	return res
}

// actOfctlDecode feeds hex to `ovs-ofctl parse-actions VER` (or
// parse-instructions) and returns the decoded text and the byte differences
// ovs-ofctl reports between the input and its own re-encoding. A decode
// error is returned as err.
func actOfctlDecode(t testing.TB, cmd string, v Version, b []byte) (text string, diffs []string, err error) {
	t.Helper()
	c := exec.Command("ovs-ofctl", cmd, actOfName(v))
	c.Stdin = strings.NewReader(hex.EncodeToString(b) + "\n")
	out, runErr := c.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "actions="):
			text = strings.TrimPrefix(line, "actions=")
		case regexp.MustCompile(`^ *[0-9]+: `).MatchString(line):
			diffs = append(diffs, strings.TrimSpace(line))
		case strings.HasPrefix(line, "bad "):
			err = fmt.Errorf("%s", line)
		}
	}
	if runErr != nil && err == nil {
		err = fmt.Errorf("ovs-ofctl %s: %v: %s", cmd, runErr, out)
	}
	return text, diffs, err
}

// actOfpPrintFlow decodes the flow mod prefix+ins with `ovs-ofctl ofp-print`
// and returns the printed actions.
func actOfpPrintFlow(t testing.TB, prefix, ins []byte) string {
	t.Helper()
	msg := append(append([]byte(nil), prefix...), ins...)
	binary.BigEndian.PutUint16(msg[2:4], uint16(len(msg)))
	out, err := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(msg)).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl ofp-print: %v\n%s", err, out)
	}
	_, after, ok := strings.Cut(strings.TrimSpace(string(out)), " actions=")
	if !ok || strings.Contains(string(out), "decode error") {
		t.Fatalf("ovs-ofctl ofp-print: %s", out)
	}
	return after
}

// actHex decodes a hex fixture; words that are not hex (comments) and "|"
// separators are skipped.
func actHex(t testing.TB, s string) []byte {
	t.Helper()
	var h strings.Builder
	for _, w := range strings.Fields(strings.ReplaceAll(s, "|", " ")) {
		if actHexWord.MatchString(w) {
			h.WriteString(w)
		}
	}
	b, err := hex.DecodeString(h.String())
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func actRef(s string) FieldRef { return MustParseFieldRef(s) }

func actIP(s string) Field {
	info, _ := FieldByName("ip_dst")
	return Field{Class: info.Class, Field: info.Field, Value: actHexIPv4(s)}
}

func actHexIPv4(s string) []byte {
	var a, b, c, d byte
	fmt.Sscanf(s, "%d.%d.%d.%d", &a, &b, &c, &d)
	return []byte{a, b, c, d}
}

func actField(name string, value, mask []byte) Field {
	info, ok := FieldByName(name)
	if !ok {
		panic("no field " + name)
	}
	f := Field{Class: info.Class, Field: info.Field, Experimenter: info.Experimenter, Value: value}
	if mask != nil {
		f.Mask = mask
	}
	return f
}

// actOracleCase is one flow whose instructions ovs-ofctl encodes. want, when
// set, is the Go value that must decode from (and encode to) OVS's bytes in
// every version the case runs in.
type actOracleCase struct {
	name  string
	match string // default "ip"
	acts  string
	only  Version // 0: both OF1.3 and OF1.5
	want  []Instruction
}

// runsIn reports whether the case is one of version v.
func (c actOracleCase) runsIn(v Version) bool { return c.only == 0 || c.only == v }

// flowMatch is the case's match, "ip" by default.
func (c actOracleCase) flowMatch() string {
	if c.match == "" {
		return "ip"
	}
	return c.match
}

// flow is the case as a flow for ovs-ofctl: priority 1, its match, its
// actions.
func (c actOracleCase) flow() string { return "priority=1," + c.flowMatch() + ",actions=" + c.acts }

func actApply(acts ...Action) []Instruction { return []Instruction{ApplyActions{Actions: acts}} }

// actOracleCases is a function because the field registry is filled in
// init functions, after package variables.
func actOracleCases() []actOracleCase {
	return []actOracleCase{
		// Standard actions.
		{name: "output port", acts: "output:3", want: actApply(Output{Port: 3})},
		{name: "reserved ports", acts: "IN_PORT,LOCAL,NORMAL,FLOOD,ALL,TABLE",
			want: actApply(OutputPort(PortInPort), OutputPort(PortLocal), OutputPort(PortNormal), OutputPort(PortFlood), OutputPort(PortAll), OutputPort(PortTable))},
		{name: "output controller", acts: "CONTROLLER", want: actApply(OutputPort(PortController))},
		{name: "controller max_len", acts: "controller:128", want: actApply(Output{Port: PortController, MaxLen: 128})},
		{name: "group", acts: "group:1", want: actApply(Group{ID: 1})},
		{name: "set_field ipv4", acts: "set_field:10.0.0.1->ip_dst", want: actApply(SetField{Field: actIP("10.0.0.1")})},
		{name: "set_field eth", acts: "set_field:00:11:22:33:44:55->eth_dst",
			want: actApply(SetField{Field: actField("eth_dst", []byte{0, 0x11, 0x22, 0x33, 0x44, 0x55}, nil)})},
		{name: "set_field reg", acts: "set_field:5->reg0", want: actApply(SetField{Field: actField("reg0", []byte{0, 0, 0, 5}, nil)})},
		{name: "set_field tun_id", acts: "set_field:0x1234->tun_id"},
		{name: "set_field tun_dst", acts: "set_field:1.2.3.4->tun_dst"},
		{name: "set_field pkt_mark", acts: "set_field:1->pkt_mark"},
		{name: "set_field vlan", match: "vlan_tci=0x1000/0x1000,ip", acts: "set_field:4196->vlan_vid,mod_vlan_vid:100,set_field:3->vlan_pcp"},
		{name: "set_field tcp port", match: "tcp", acts: "set_field:80->tcp_dst"},
		{name: "set_field ttl and dscp", acts: "set_field:5->ip_dscp,set_field:64->nw_ttl"},
		{name: "set_field ipv6", match: "ipv6", acts: "set_field:fe80::1->ipv6_dst,set_field:0x12345->ipv6_label"},
		{name: "masked set_field prefix", only: Version15, acts: "set_field:10.0.0.0/255.0.0.0->ip_dst"},
		{name: "masked set_field prefix of13", only: Version13, acts: "set_field:10.0.0.0/255.0.0.0->ip_dst"},
		{name: "masked set_field mac", acts: "set_field:00:00:00:00:00:01/00:00:00:00:00:ff->eth_src"},
		{name: "masked set_field ipv6 prefix", match: "ipv6", acts: "set_field:fe80::/64->ipv6_src"},
		{name: "masked set_field of15", only: Version15, acts: "set_field:0x9/0x9->reg0",
			want: actApply(SetField{Field: actField("reg0", []byte{0, 0, 0, 9}, []byte{0, 0, 0, 9})})},
		{name: "masked set_field of13 splits into reg_loads", only: Version13, acts: "set_field:0x9/0x9->reg0",
			want: actApply(RegLoad{Dst: actRef("reg0[0]"), Value: 1}, RegLoad{Dst: actRef("reg0[3]"), Value: 1})},
		{name: "load of13", only: Version13, acts: "load:0x5->NXM_NX_REG0[8..15]", want: actApply(RegLoad{Dst: actRef("reg0[8..15]"), Value: 5})},
		{name: "load of15 is masked set_field", only: Version15, acts: "load:0x5->NXM_NX_REG0[8..15]",
			want: actApply(SetField{Field: actField("reg0", []byte{0, 0, 5, 0}, []byte{0, 0, 0xff, 0})})},
		{name: "load whole reg", acts: "load:0x5->NXM_NX_REG0[]"},
		{name: "load metadata bits", acts: "load:1->metadata[0..7]"},
		{name: "load tun_id bits", acts: "set_field:0x5/0xff->tun_id"},
		{name: "load xreg", acts: "set_field:0x1/0x1->xreg0"},
		{name: "load xxreg", acts: "set_field:0x5/0xff->xxreg0"},
		{name: "load xxreg whole", acts: "set_field:0x1->xxreg0"},
		{name: "move regs", acts: "move:NXM_NX_REG0[0..15]->NXM_NX_REG1[16..31]",
			want: actApply(RegMove{Src: actRef("reg0[0..15]"), Dst: actRef("reg1[16..31]")})},
		{name: "move eth", acts: "move:eth_src->eth_dst", want: actApply(RegMove{Src: actRef("eth_src"), Dst: actRef("eth_dst")})},
		{name: "move ip to reg", acts: "move:ip_src[]->reg1[]"},
		{name: "move metadata", acts: "move:metadata[0..31]->reg0[]"},
		{name: "move tun_id", acts: "move:tun_id[0..31]->reg0[]"},
		{name: "move ct_label", acts: "move:ct_label[0..31]->reg1[]"},
		{name: "move xreg", acts: "move:xreg0[0..31]->reg1[]"},
		{name: "move in_port", acts: "move:in_port[]->reg1[0..15]"},
		{name: "move tcp_flags", match: "tcp", acts: "move:tcp_flags[]->reg1[0..11]"},
		{name: "move actset_output", acts: "move:actset_output[]->reg1[]"},
		{name: "move ip_dscp", acts: "move:ip_dscp[]->reg1[0..5]"},
		{name: "move nw_tos", acts: "move:nw_tos[]->reg1[0..7]"},
		{name: "push and pop vlan", acts: "push_vlan:0x8100,pop_vlan", want: actApply(PushVLAN{EtherType: 0x8100}, PopVLAN{})},
		{name: "dec_ttl", acts: "dec_ttl", want: actApply(DecTTL{})},
		{name: "set_queue", acts: "set_queue:3", want: actApply(SetQueue{ID: 3})},

		// Resubmit.
		{name: "resubmit table", acts: "resubmit(,10)", want: actApply(ResubmitTable(10))},
		{name: "resubmit port and table", acts: "resubmit(2,10)", want: actApply(Resubmit{InPort: 2, Table: 10})},
		{name: "resubmit port", acts: "resubmit:3", want: actApply(Resubmit{InPort: 3, Table: ResubmitCurrentTable})},
		{name: "resubmit local", acts: "resubmit(LOCAL)"},
		{name: "resubmit ct", match: "ct_state=+trk+est,ip", acts: "resubmit(,10,ct)", want: actApply(Resubmit{InPort: Port16InPort, Table: 10, CT: true})},

		// Conntrack.
		{name: "ct commit", acts: "ct(commit)", want: actApply(CT{Commit: true, RecircTable: CTNoRecirc})},
		{name: "ct nat lookup", acts: "ct(table=1,zone=64000,nat)", want: actApply(CT{RecircTable: 1, Zone: 64000, Actions: []Action{NAT{}}})},
		{name: "ct zone from reg", acts: "ct(zone=NXM_NX_REG6[0..15])", want: actApply(CT{ZoneSrc: actRef("reg6[0..15]"), RecircTable: CTNoRecirc})},
		{name: "ct force", acts: "ct(commit,force,zone=reg6[0..15],table=20)", want: actApply(CT{Commit: true, Force: true, ZoneSrc: actRef("reg6[0..15]"), RecircTable: 20})},
		{name: "ct zone from metadata", acts: "ct(zone=metadata[0..15])"},
		{name: "ct alg ftp", match: "tcp", acts: "ct(commit,alg=ftp)", want: actApply(CT{Commit: true, RecircTable: CTNoRecirc, Alg: CTAlgFTP})},
		{name: "ct alg tftp", match: "udp", acts: "ct(commit,alg=tftp)"},
		{name: "ct alg with exec", match: "tcp", acts: "ct(commit,alg=ftp,zone=3,table=2,exec(set_field:1->ct_mark))"},
		{name: "ct exec mark", acts: "ct(commit,exec(set_field:0x1->ct_mark))",
			want: actApply(CT{Commit: true, RecircTable: CTNoRecirc, Actions: []Action{SetField{Field: actField("ct_mark", []byte{0, 0, 0, 1}, nil)}}})},
		{name: "ct exec masked label and mark", acts: "ct(commit,exec(load:0x1->NXM_NX_CT_LABEL[0],set_field:0x2/0x2->ct_mark))"},
		{name: "ct exec label", acts: "ct(commit,zone=1,exec(set_field:1->ct_label))"},
		{name: "ct exec move into label", acts: "ct(commit,zone=65000,exec(move:NXM_NX_TUN_IPV4_SRC[]->NXM_NX_CT_LABEL[0..31]))",
			want: actApply(CT{Commit: true, Zone: 65000, RecircTable: CTNoRecirc, Actions: []Action{
				RegMove{Src: actRef("tun_src"), Dst: actRef("ct_label[0..31]")},
			}})},
		{name: "ct exec move and mark", acts: "ct(commit,zone=65000,exec(move:NXM_NX_TUN_IPV4_SRC[]->NXM_NX_CT_LABEL[0..31],set_field:0x10/0x10->ct_mark))"},
		{name: "ct exec move into mark", acts: "ct(commit,exec(move:NXM_NX_REG0[0..7]->NXM_NX_CT_MARK[8..15]))"},
		{name: "ct exec wide masked label", acts: "ct(commit,exec(set_field:0xffffffffffffffffffff/0xffffffffffffffffffff->ct_label))"},
		{name: "ct exec split label", acts: "ct(commit,exec(set_field:0x1000000000000000100000000/0x1000000000000000100000000->ct_label))"},
		{name: "ct service dnat", acts: "ct(commit,table=15,zone=65000,nat(dst=10.128.0.2:8080),exec(set_field:0x2->ct_mark))"},
		{name: "ct dnat typical", acts: "ct(commit,table=40,zone=1,nat(dst=10.128.1.2:8080))", want: actApply(actServiceCT())},
		{name: "ct snat one address", acts: "ct(commit,nat(src=10.0.0.1))"},
		{name: "ct snat range random", acts: "ct(commit,nat(src=10.0.0.1-10.0.0.10:1000-2000,random))"},
		{name: "ct dnat persistent hash", acts: "ct(commit,nat(dst=10.0.0.1:80,persistent,hash))"},
		{name: "ct dnat port range", acts: "ct(commit,nat(dst=10.0.0.1:80-90))"},
		{name: "ct nat src flag only", acts: "ct(commit,nat(src))"},
		{name: "ct nat dst flag then table", acts: "ct(commit,nat(dst),table=3)"},
		{name: "ct nat ipv6 port", match: "ipv6", acts: "ct(commit,nat(dst=[fe80::1]:80))"},
		{name: "ct nat ipv6 range", match: "ipv6", acts: "ct(commit,nat(src=fe80::1-fe80::2))"},
		{name: "ct nat ipv6 range ports", match: "ipv6", acts: "ct(commit,nat(src=[fe80::1]-[fe80::2]:10-20))"},
		{name: "ct nat ipv6 one", match: "ipv6", acts: "ct(commit,nat(src=[fe80::1]))"},
		{name: "ct nat after exec", acts: "ct(commit,exec(set_field:1->ct_mark,nat(dst=1.2.3.4),set_field:2->ct_label))"},
		{name: "ct nat twice", acts: "ct(commit,nat,nat)"},
		{name: "ct_clear", acts: "ct_clear", want: actApply(CTClear{})},

		// Learn.
		{name: "learn match load output", acts: "learn(table=10,idle_timeout=30,hard_timeout=60,priority=100,cookie=0x1234,NXM_OF_VLAN_TCI[0..11],NXM_OF_ETH_DST[]=NXM_OF_ETH_SRC[],load:NXM_OF_IN_PORT[]->NXM_NX_REG0[0..15],output:NXM_OF_IN_PORT[])",
			want: actApply(Learn{TableID: 10, IdleTimeout: 30, HardTimeout: 60, Priority: 100, Cookie: 0x1234, Specs: []LearnSpec{
				LearnMatchField(actRef("vlan_tci[0..11]"), actRef("vlan_tci[0..11]")),
				LearnMatchField(actRef("eth_dst"), actRef("eth_src")),
				LearnLoadField(actRef("in_port"), actRef("reg0[0..15]")),
				LearnOutputField(actRef("in_port")),
			}})},
		{name: "learn immediates and flags", acts: "learn(table=1,eth_type=0x800,ip_src=10.0.0.1,load:0x5->NXM_NX_REG1[],send_flow_rem,delete_learned,fin_idle_timeout=5,fin_hard_timeout=10)",
			want: actApply(Learn{TableID: 1, Priority: LearnDefaultPriority, Flags: LearnSendFlowRem | LearnDeleteLearned, FinIdle: 5, FinHard: 10, Specs: []LearnSpec{
				LearnMatchValue(actRef("eth_type"), []byte{0x08, 0x00}),
				LearnMatchValue(actRef("ip_src"), []byte{10, 0, 0, 1}),
				LearnLoadValue([]byte{0, 0, 0, 5}, actRef("reg1")),
			}})},
		{name: "learn2 limit result_dst", acts: "learn(table=1,limit=10,result_dst=reg0[0],in_port=99)",
			want: actApply(Learn{TableID: 1, Priority: LearnDefaultPriority, Flags: LearnWriteResult, Limit: 10, ResultDst: actRef("reg0[0]"), Specs: []LearnSpec{
				LearnMatchValue(actRef("in_port"), []byte{0, 99}),
			}})},
		{name: "learn2 limit only", acts: "learn(table=1,limit=10,in_port=99)"},
		{name: "learn partial fields", acts: "learn(table=2,eth_src=00:11:22:33:44:55,reg1[0..3]=0x5,load:0xabcdef->reg2[0..23])"},
		{name: "learn field to field", acts: "learn(table=2,NXM_NX_REG1[0..3]=NXM_NX_REG1[4..7],reg2[0..3])"},
		{name: "learn zero immediates", acts: "learn(table=2,reg1[0..3]=0,load:0->reg2[0..3],load:0->reg3[],reg4=0,load:0x0->NXM_NX_CT_LABEL[0..100])"},
		{name: "learn wide load", acts: "learn(table=2,eth_type=0x86dd,ipv6_src=fe80::1,load:0xffffffffffffffffffffff->NXM_NX_CT_LABEL[])"},
		{name: "learn tunnel and metadata", acts: "learn(table=2,tun_id=5,tun_src=1.2.3.4,metadata=0x5,ct_label=0x5)"},
		{name: "learn everything", acts: "learn(table=2,hard_timeout=10,idle_timeout=5,priority=5,cookie=0x5,fin_idle_timeout=1,fin_hard_timeout=2,send_flow_rem,delete_learned,limit=3,result_dst=reg0[1])"},
		{name: "learn defaults", acts: "learn()"},

		// Controller.
		{name: "controller userdata pause", acts: "controller(userdata=01.02,pause)",
			want: actApply(Controller2{MaxLen: 0xffff, Reason: PacketInAction, Userdata: []byte{1, 2}, Pause: true})},
		{name: "controller meter", acts: "controller(userdata=01.02,pause,meter_id=1)"},
		{name: "controller meter only", acts: "controller(meter_id=3)"},
		{name: "controller legacy", acts: "controller(reason=no_match,id=5,max_len=100)",
			want: actApply(Controller2{MaxLen: 100, ControllerID: 5, Reason: PacketInNoMatch})},
		{name: "controller all props", acts: "controller(max_len=100,id=5,reason=invalid_ttl,userdata=aa,pause,meter_id=7)"},
		{name: "controller id", acts: "controller(id=3)"},
		{name: "controller reasons", acts: "controller(reason=group),controller(reason=packet_out),controller(reason=action_set)"},

		// Other Nicira actions.
		{name: "conjunction", acts: "conjunction(1,2/2)", want: actApply(Conjunction{ID: 1, Clause: 2, NClauses: 2})},
		{name: "note short", acts: "note:01.02.03", want: actApply(Note{Data: []byte{1, 2, 3, 0, 0, 0}})},
		{name: "note long", acts: "note:01.02.03.04.05.06.07"},
		{name: "output_reg whole", acts: "output:NXM_NX_REG0[]", want: actApply(OutputRegister(actRef("reg0")))},
		{name: "output_reg bits", acts: "output:reg0[0..15]"},
		{name: "output_reg oxm field", acts: "output:metadata[0..15]"},
		{name: "multipath", acts: "multipath(symmetric_l4,1024,hrw,2,0,NXM_NX_REG0[0..1])",
			want: actApply(Multipath{Fields: HashSymmetricL4, Basis: 1024, Algorithm: MultipathHRW, MaxLink: 1, Dst: actRef("reg0[0..1]")})},
		{name: "multipath modulo", acts: "multipath(eth_src,50,modulo_n,8,0,reg1[0..2])"},
		{name: "exit", acts: "exit", want: actApply(Exit{})},

		// Instructions.
		{name: "meter then output", acts: "meter:2,output:3", want: []Instruction{Meter{ID: 2}, ApplyActions{Actions: []Action{Output{Port: 3}}}}},
		{name: "meter alone", acts: "meter:3", want: []Instruction{Meter{ID: 3}}},
		{name: "all instructions", match: "table=1,ip", acts: "meter:2,output:1,write_metadata:0x5/0xff,goto_table:3",
			want: []Instruction{Meter{ID: 2}, ApplyActions{Actions: []Action{Output{Port: 1}}}, WriteMetadata{Metadata: 5, Mask: 0xff}, GotoTable{Table: 3}}},
		{name: "clear and write", match: "table=1,ip", acts: "clear_actions,write_actions(output:1),goto_table:5",
			want: []Instruction{ClearActions{}, WriteActions{Actions: []Action{Output{Port: 1}}}, GotoTable{Table: 5}}},
		{name: "write_metadata full mask", acts: "write_metadata:0x5", want: []Instruction{WriteMetadata{Metadata: 5, Mask: ^uint64(0)}}},
		{name: "write_actions set", acts: "write_actions(group:1,set_field:1->reg0)"},
		{name: "meter and clear", acts: "meter:2,clear_actions"},
		{name: "drop", acts: "drop", want: nil},
		{name: "service chain", acts: "ct(commit,table=40,zone=1,nat(dst=10.128.1.2:8080)),goto_table:50"},
	}
}

func actServiceCT() CT {
	return CT{Commit: true, RecircTable: 40, Zone: 1, Actions: []Action{
		NAT{Dst: true, MinAddr: netip.MustParseAddr("10.128.1.2"), MinPort: 8080},
	}}
}

// TestActionsAgainstOVS checks every case in both versions: OVS's bytes
// decode, re-encode byte for byte, render as OVS printed them, and match the
// Go value when the case has one.
func TestActionsAgainstOVS(t *testing.T) {
	otNeedOfctl(t)
	for _, c := range actOracleCases() {
		for _, v := range []Version{Version13, Version15} {
			if !c.runsIn(v) {
				continue
			}
			t.Run(c.name+"/"+v.String(), func(t *testing.T) {
				o := actParseFlow(t, v, c.flow())

				ins, err := UnmarshalInstructions(o.ins, v)
				if err != nil {
					t.Fatalf("UnmarshalInstructions(% x): %v", o.ins, err)
				}
				if got := InstructionsString(ins); got != o.text {
					t.Errorf("InstructionsString = %q\n                 ovs-ofctl: %q", got, o.text)
				}
				enc, err := AppendInstructions(nil, v, ins)
				if err != nil {
					t.Fatalf("AppendInstructions: %v", err)
				}
				if !bytes.Equal(enc, o.ins) {
					t.Errorf("re-encoding differs\n got % x\nwant % x", enc, o.ins)
				}
				if c.want != nil || c.acts == "drop" {
					if !reflect.DeepEqual(ins, c.want) {
						t.Errorf("decoded\n %#v\nwant\n %#v", ins, c.want)
					}
					enc, err := AppendInstructions(nil, v, c.want)
					if err != nil {
						t.Fatalf("AppendInstructions(want): %v", err)
					}
					if !bytes.Equal(enc, o.ins) {
						t.Errorf("encoding of the Go value differs\n got % x\nwant % x", enc, o.ins)
					}
				}
				// Second oracle: ovs-ofctl decodes our bytes to the same text
				// and re-encodes them without differences. parse-instructions
				// checks them against an empty match, so actions that need
				// one go through ofp-print of the whole flow mod instead.
				if len(enc) == 0 {
					return
				}
				text, diffs, err := actOfctlDecode(t, "parse-instructions", v, enc)
				if err != nil && strings.Contains(err.Error(), "MATCH_INCONSISTENT") {
					text, err = actOfpPrintFlow(t, o.prefix, enc), nil
				}
				if err != nil {
					t.Fatalf("ovs-ofctl parse-instructions: %v", err)
				}
				if text != o.text {
					t.Errorf("parse-instructions text %q, parse-flow %q", text, o.text)
				}
				if len(diffs) > 0 {
					t.Errorf("ovs-ofctl re-encodes differently: %v", diffs)
				}
			})
		}
	}
}

// TestActionSeedsCurrent checks that the fuzz seeds in action_seeds_test.go
// are what ovs-ofctl produces for the oracle cases today. With
// NODEFLOW_UPDATE_ACTION_SEEDS=1 it rewrites that file instead.
func TestActionSeedsCurrent(t *testing.T) {
	otNeedOfctl(t)
	var want []actSeed
	for _, c := range actOracleCases() {
		for _, v := range []Version{Version13, Version15} {
			if !c.runsIn(v) {
				continue
			}
			o := actParseFlow(t, v, c.flow())
			want = append(want, actSeed{v: v, acts: c.acts, ins: hex.EncodeToString(o.ins)})
		}
	}
	if os.Getenv("NODEFLOW_UPDATE_ACTION_SEEDS") != "" {
		var sb strings.Builder
		sb.WriteString("// Code generated by TestActionSeedsCurrent with NODEFLOW_UPDATE_ACTION_SEEDS=1; DO NOT EDIT.\n\n")
		sb.WriteString("package openflow\n\n")
		sb.WriteString("// actSeeds are ovs-ofctl's encodings of the oracle cases' instructions,\n// the fuzz targets' seed corpus.\n")
		sb.WriteString("var actSeeds = []actSeed{\n")
		for _, s := range want {
			vs := "Version13"
			if s.v == Version15 {
				vs = "Version15"
			}
			fmt.Fprintf(&sb, "\t{%s, %q, %q},\n", vs, s.acts, s.ins)
		}
		sb.WriteString("}\n")
		if err := os.WriteFile("action_seeds_test.go", []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !reflect.DeepEqual(want, actSeeds) {
		t.Errorf("action_seeds_test.go is stale: rerun with NODEFLOW_UPDATE_ACTION_SEEDS=1 (%d seeds, ovs-ofctl gives %d)", len(actSeeds), len(want))
	}
}

// TestGoActionsAgainstOVS encodes Go values and has `ovs-ofctl parse-actions`
// decode them: the text must equal ActionsString and ovs-ofctl's own
// re-encoding must not differ from ours.
func TestGoActionsAgainstOVS(t *testing.T) {
	otNeedOfctl(t)
	v4 := netip.MustParseAddr
	cases := []struct {
		name string
		only Version
		acts []Action
	}{
		{name: "output with max_len", acts: []Action{Output{Port: 3, MaxLen: 64}}},
		{name: "output to controller with max_len", acts: []Action{Output{Port: PortController, MaxLen: 1500}}},
		{name: "resubmit variants", acts: []Action{ResubmitTable(0), Resubmit{InPort: Port16Local, Table: 7}, Resubmit{InPort: 9, Table: ResubmitCurrentTable}}},
		{name: "ct zone from metadata", acts: []Action{CT{ZoneSrc: actRef("metadata[16..31]"), RecircTable: 4}}},
		{name: "ct zone from eth_type", acts: []Action{CT{ZoneSrc: actRef("dl_type"), RecircTable: CTNoRecirc}}},
		{name: "ct everything", acts: []Action{CT{Commit: true, Force: true, Zone: 7, RecircTable: 9, Alg: CTAlgFTP, Actions: []Action{
			NAT{Src: true, MinAddr: v4("10.0.0.1"), MaxAddr: v4("10.0.0.9"), MinPort: 1000, MaxPort: 2000, Persistent: true, Random: true},
			SetField{Field: actField("ct_mark", []byte{0, 0, 0, 2}, []byte{0, 0, 0, 2})},
			RegLoad{Dst: actRef("ct_label[64..127]"), Value: 0xdead},
		}}}},
		{name: "ct nat v6", acts: []Action{CT{Commit: true, RecircTable: CTNoRecirc, Actions: []Action{
			NAT{Dst: true, MinAddr: v4("fd00::1"), MaxAddr: v4("fd00::ff"), MinPort: 80, Hash: true},
		}}}},
		{name: "ct nat v6 no port", acts: []Action{CT{Commit: true, RecircTable: CTNoRecirc, Actions: []Action{NAT{Src: true, MinAddr: v4("fd00::1")}}}}},
		{name: "load eth_dst by oxm name", only: Version13, acts: []Action{RegLoad{Dst: actRef("OXM_OF_ETH_DST[0..7]"), Value: 0xff}}},
		{name: "load becomes set_field in of15", only: Version15, acts: []Action{RegLoad{Dst: actRef("tun_id[8..15]"), Value: 0x12}}},
		{name: "move tcp_flags", acts: []Action{RegMove{Src: actRef("tcp_flags"), Dst: actRef("reg3[0..11]")}}},
		{name: "move in_port to reg", acts: []Action{RegMove{Src: actRef("in_port"), Dst: actRef("reg3[16..31]")}}},
		{name: "masked set_field tun_id", acts: []Action{SetField{Field: actField("tun_id", []byte{0, 0, 0, 0, 0, 0, 0x12, 0x34}, []byte{0, 0, 0, 0, 0, 0, 0xff, 0xf0})}}},
		{name: "masked set_field clears stray bits", acts: []Action{SetField{Field: actField("reg0", []byte{0, 0, 0, 0xff}, []byte{0, 0, 0, 0x0f})}}},
		{name: "masked set_field ipv6 in of13", only: Version13, acts: []Action{SetField{Field: actField("ipv6_dst",
			[]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff})}}},
		{name: "output_reg max_len", acts: []Action{OutputReg{Src: actRef("reg1[0..15]"), MaxLen: 128}}},
		{name: "learn built from names", acts: []Action{Learn{TableID: 30, HardTimeout: 300, Priority: 10, Flags: LearnDeleteLearned, Cookie: 0xabc, Specs: []LearnSpec{
			LearnMatchValue(actRef("eth_type"), []byte{0x08, 0x00}),
			LearnMatchValue(actRef("nw_proto"), []byte{6}),
			LearnMatchField(actRef("ip_dst"), actRef("ip_src")),
			LearnMatchField(actRef("tcp_dst"), actRef("tcp_dst")),
			LearnLoadValue([]byte{1}, actRef("reg4[16]")),
			LearnLoadField(actRef("reg3"), actRef("reg3")),
			LearnOutputField(actRef("reg5[0..15]")),
		}}}},
		{name: "learn immediate shorter than its field", acts: []Action{Learn{TableID: 1, Priority: LearnDefaultPriority, Specs: []LearnSpec{
			LearnMatchValue(actRef("reg1"), []byte{7}),
		}}}},
		{name: "controller everything", acts: []Action{Controller2{MaxLen: 200, ControllerID: 3, Reason: PacketInNoMatch, Userdata: []byte("hello"), Pause: true, MeterID: 9}}},
		{name: "controller legacy defaults but id", acts: []Action{Controller2{MaxLen: 0xffff, Reason: PacketInAction, ControllerID: 1}}},
		{name: "note empty", acts: []Action{Note{}}},
		{name: "note exact", acts: []Action{Note{Data: []byte("abcdefghijklmn")}}},
		{name: "conjunction", acts: []Action{Conjunction{ID: 0xffffffff, Clause: 64, NClauses: 64}}},
		{name: "multipath", acts: []Action{Multipath{Fields: HashSymmetricL3, Basis: 7, Algorithm: MultipathIterHash, MaxLink: 15, Arg: 3, Dst: actRef("reg2[4..7]")}}},
		{name: "meter action", only: Version15, acts: []Action{Meter{ID: 5}, Output{Port: 1}}},
		{name: "exit and ct_clear", acts: []Action{CTClear{}, Exit{}}},
	}
	for _, c := range cases {
		for _, v := range []Version{Version13, Version15} {
			if c.only != 0 && c.only != v {
				continue
			}
			t.Run(c.name+"/"+v.String(), func(t *testing.T) {
				b, err := AppendActions(nil, v, c.acts)
				if err != nil {
					t.Fatal(err)
				}
				text, diffs, err := actOfctlDecode(t, "parse-actions", v, b)
				if err != nil {
					t.Fatalf("ovs-ofctl: %v (bytes % x)", err, b)
				}
				acts, err := UnmarshalActions(b, v)
				if err != nil {
					t.Fatal(err)
				}
				if got := ActionsString(acts); got != text {
					t.Errorf("ActionsString = %q\n     ovs-ofctl: %q", got, text)
				}
				if len(diffs) > 0 {
					t.Errorf("ovs-ofctl re-encodes differently: %v (bytes % x)", diffs, b)
				}
			})
		}
	}
}

// TestActionsCrossVersion decodes OVS's encoding of each case in one version
// and encodes the result for the other: the bytes must be what OVS itself
// produces for that version (a controller reading flows over OF1.3 can
// write them back over OF1.5 and vice versa).
func TestActionsCrossVersion(t *testing.T) {
	otNeedOfctl(t)
	// Masked writes that OF1.3 splits into several REG_LOADs stay split
	// when re-encoded for OF1.5, where OVS writes one masked set_field.
	split := map[string]bool{
		"ct exec wide masked label": true,
		"ct exec split label":       true,
	}
	for _, c := range actOracleCases() {
		if c.only != 0 {
			continue
		}
		flow := c.flow()
		o13 := actParseFlow(t, Version13, flow)
		o15 := actParseFlow(t, Version15, flow)
		for _, d := range []struct {
			from, to Version
			in, want []byte
		}{{Version13, Version15, o13.ins, o15.ins}, {Version15, Version13, o15.ins, o13.ins}} {
			t.Run(c.name+"/"+d.from.String()+"->"+d.to.String(), func(t *testing.T) {
				if split[c.name] && d.from == Version13 {
					t.Skip("OF1.3 split the masked write into several loads")
				}
				if c.name == "load whole reg" && d.from == Version15 {
					// OVS remembers the flow said load: and writes
					// REG_LOAD in OF1.3; the OF1.5 bytes only say
					// set_field, which is what we write.
					t.Skip("the OF1.5 bytes do not say the write was a load")
				}
				ins, err := UnmarshalInstructions(d.in, d.from)
				if err != nil {
					t.Fatal(err)
				}
				got, err := AppendInstructions(nil, d.to, ins)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, d.want) {
					t.Errorf("got % x\nwant % x", got, d.want)
				}
			})
		}
	}
}
