package openflow

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// Byte fixtures below are written field by field; "ct hdr" is the 24-byte
// NXAST_CT header: type 0xffff, length, Nicira vendor, subtype 35, flags,
// zone_src, zone, recirc_table, pad, alg.

func TestUnmarshalActionsErrors(t *testing.T) {
	cases := []struct {
		name    string
		v       Version
		hex     string
		is      error
		mention []string // substrings the error must contain
	}{
		{"truncated header", Version15, "0000", io.ErrUnexpectedEOF, []string{"action 0", "header"}},
		{"truncated output", Version15, "0000 0010 00000003", io.ErrUnexpectedEOF, []string{"action 0 (output)", "length 16, have 8"}},
		{"truncated second action", Version15, "0016 0008 00000001 | ffff 0018 00002320 0023", io.ErrUnexpectedEOF, []string{"action 1 (nx ct)", "length 24, have 10"}},
		{"length not a multiple of 8", Version15, "0000 000c 00000003 0000 0000", ErrMalformed, []string{"action 0 (output)", "length 12"}},
		{"length zero", Version15, "0000 0000 00000000", ErrMalformed, []string{"length 0"}},
		{"length four", Version15, "0012 0004 00000000", ErrMalformed, []string{"action 0 (pop_vlan)", "length 4"}},
		{"output too long", Version15, "0000 0018 00000003 0000 000000000000 0000000000000000", ErrMalformed, []string{"output", "want 16"}},
		{"nicira action of 8 bytes", Version15, "ffff 0008 00002320", ErrMalformed, []string{"Nicira action needs at least 16"}},
		{"group too long", Version13, "0016 0010 00000001 00000000 00000000", ErrMalformed, []string{"group", "want 8"}},
		{"nat outside ct", Version15, "ffff0010 00002320 0024 0000 0000 0000", ErrMalformed, []string{"nx nat", "nat outside ct"}},
		{"output nested in ct", Version15,
			"ffff0028 00002320 0023 0001 00000000 0000 ff 000000 0000 | 0000 0010 00000001 0000 000000000000",
			ErrMalformed, []string{"action 0 (nx ct)", "nested action 0 (output)", "not allowed inside ct"}},
		{"set_field of reg in ct", Version15,
			"ffff0028 00002320 0023 0001 00000000 0000 ff 000000 0000 | 0019 0010 00010004 00000005 00000000",
			ErrMalformed, []string{"nx ct", "ct cannot set reg0"}},
		{"load of reg in ct", Version13,
			"ffff0030 00002320 0023 0001 00000000 0000 ff 000000 0000 | ffff0018 00002320 0007 001f 00010004 0000000000000005",
			ErrMalformed, []string{"nx ct", "ct cannot load NXM_NX_REG0[]"}},
		{"resubmit in ct", Version15,
			"ffff0028 00002320 0023 0001 00000000 0000 ff 000000 0000 | ffff0010 00002320 000e fff8 0a 000000",
			ErrMalformed, []string{"nx ct", "not allowed inside ct"}},
		{"unknown action in ct", Version15,
			"ffff0028 00002320 0023 0001 00000000 0000 ff 000000 0000 | ffff0010 00002320 00f0 000000000000",
			ErrMalformed, []string{"nx ct", "not allowed inside ct"}},
		{"nat src without commit", Version15,
			"ffff0028 00002320 0023 0000 00000000 0000 ff 000000 0000 | ffff0010 00002320 0024 0000 0001 0000",
			ErrMalformed, []string{"nx ct", "needs ct(commit)"}},
		{"truncated nested action", Version15,
			"ffff0028 00002320 0023 0001 00000000 0000 ff 000000 0000 | ffff0018 00002320 0024 0000 0000 0000",
			io.ErrUnexpectedEOF, []string{"nx ct", "nested action 0"}},
		{"ct force without commit", Version15, "ffff0018 00002320 0023 0002 00000000 0000 ff 000000 0000", ErrMalformed, []string{"force without commit"}},
		{"ct zone of 17 bits", Version15, "ffff0018 00002320 0023 0000 00010c04 0010 ff 000000 0000", ErrMalformed, []string{"zone", "17 bits"}},
		{"ct zone beyond field", Version15, "ffff0018 00002320 0023 0000 00010c04 044f ff 000000 0000", ErrMalformed, []string{"zone", "outside the 32-bit field"}},
		{"ct header short", Version15, "ffff0010 00002320 0023 0000 00000000", ErrMalformed, []string{"nx ct", "at least 24"}},
		{"nat src and dst", Version15,
			"ffff0030 00002320 0023 0001 00000000 0000 ff 000000 0000 | ffff0018 00002320 0024 0000 0003 0001 0a000001 00000000",
			ErrMalformed, []string{"nx nat", "both src and dst"}},
		{"nat zero address", Version15,
			"ffff0030 00002320 0023 0001 00000000 0000 ff 000000 0000 | ffff0018 00002320 0024 0000 0001 0001 00000000 00000000",
			ErrMalformed, []string{"min address 0.0.0.0"}},
		{"nat max below min", Version15,
			"ffff0030 00002320 0023 0001 00000000 0000 ff 000000 0000 | ffff0018 00002320 0024 0000 0001 0003 0a000002 0a000001",
			ErrMalformed, []string{"address range 10.0.0.2-10.0.0.1"}},
		{"nat hash and random", Version15,
			"ffff0028 00002320 0023 0001 00000000 0000 ff 000000 0000 | ffff0010 00002320 0024 0000 0019 0000",
			ErrMalformed, []string{"both hash and random"}},
		{"nat port without address", Version15,
			"ffff0030 00002320 0023 0001 00000000 0000 ff 000000 0000 | ffff0018 00002320 0024 0000 0001 0010 0050 000000000000",
			ErrMalformed, []string{"port range without address range"}},
		{"nat ipv6 range cut short", Version15,
			"ffff0030 00002320 0023 0001 00000000 0000 ff 000000 0000 | ffff0018 00002320 0024 0000 0001 0004 fe800000 00000000",
			ErrMalformed, []string{"ipv6 min", "too short"}},
		{"reg_load value too wide", Version13, "ffff0018 00002320 0007 0207 00010004 0000000000000100", ErrMalformed, []string{"nx reg_load", "does not fit 8 bits"}},
		{"reg_load beyond field", Version13, "ffff0018 00002320 0007 081f 00010004 0000000000000001", ErrMalformed, []string{"nx reg_load", "NXM_NX_REG0", "outside the 32-bit field"}},
		{"reg_load header width wrong", Version13, "ffff0018 00002320 0007 001f 00010008 0000000000000001", ErrMalformed, []string{"width 8 bytes, want 4"}},
		{"reg_move masked header", Version13, "ffff0018 00002320 0006 0010 0000 0000 00010104 00010204", ErrMalformed, []string{"nx reg_move", "has a mask"}},
		{"reg_move truncated header", Version13, "ffff0018 00002320 0006 0010 0000 0000 ffff1805 00002320", io.ErrUnexpectedEOF, []string{"nx reg_move", "dst"}},
		{"masked set_field in of13", Version13, "0019 0010 00010108 00000009 00000009", ErrMalformed, []string{"set_field", "needs OpenFlow 1.5"}},
		{"set_field oxm longer than action", Version15, "0019 0010 0001000c 00000009 00000009", io.ErrUnexpectedEOF, []string{"set_field", "oxm"}},
		{"set_field value of wrong width", Version15, "0019 0010 00010008 00000009 00000009", ErrMalformed, []string{"set_field", "reg0: 8-byte value, want 4"}},
		{"set_field value outside mask", Version15, "0019 0010 00010108 00000005 0000ff00", ErrMalformed, []string{"set_field", "bits outside mask"}},
		{"reg_load2 value outside mask", Version13, "ffff0018 00002320 0021 ffff1906 00002320 03 01 00000000", ErrMalformed, []string{"nx reg_load2", "bits outside mask"}},
		{"set_field empty value", Version15, "0019 0008 00010000 00000000", ErrMalformed, []string{"set_field", "empty value"}},
		{"conjunction clause beyond n", Version15, "ffff0010 00002320 0022 02 02 00000001", ErrMalformed, []string{"nx conjunction", "clause 3 of 2"}},
		{"conjunction one clause", Version15, "ffff0010 00002320 0022 00 01 00000001", ErrMalformed, []string{"clause 1 of 1"}},
		{"resubmit nonzero pad", Version15, "ffff0010 00002320 000e fff8 0a 010000", ErrMalformed, []string{"nx resubmit_table", "pad"}},
		{"controller2 nonzero header", Version15, "ffff0010 00002320 0025 000000000001", ErrMalformed, []string{"nx controller2", "must be zero"}},
		{"controller2 property overrun", Version15, "ffff0018 00002320 0025 000000000000 | 0003 0010 01020304", ErrMalformed, []string{"nx controller2", "property 3"}},
		{"controller2 unknown property", Version15, "ffff0018 00002320 0025 000000000000 | 0009 0008 00000000", ErrMalformed, []string{"unknown property 9"}},
		{"controller2 short meter property", Version15, "ffff0018 00002320 0025 000000000000 | 0005 0006 0001 0000", ErrMalformed, []string{"property 5"}},
		{"learn short", Version15, "ffff0018 00002320 0010 0000 0000 8000 0000000000000000", ErrMalformed, []string{"nx learn", "at least 32"}},
		{"learn spec cut", Version15,
			"ffff0028 00002320 0010 0000 0000 8000 0000000000000000 0000 01 00 0000 0000 | 0020 00010004 0000 00010204",
			ErrMalformed, []string{"nx learn", "spec 0"}},
		{"learn output of immediate", Version15,
			"ffff0028 00002320 0010 0000 0000 8000 0000000000000000 0000 01 00 0000 0000 | 3020 00000000 0000 0000",
			ErrMalformed, []string{"spec 0", "output of an immediate"}},
		{"learn table 255", Version15, "ffff0020 00002320 0010 0000 0000 8000 0000000000000000 0000 ff 00 0000 0000", ErrMalformed, []string{"table 255"}},
		{"learn unknown flag", Version15, "ffff0020 00002320 0010 0000 0000 8000 0000000000000000 0010 01 00 0000 0000", ErrMalformed, []string{"flags 0x10"}},
		{"multipath bad algorithm", Version15, "ffff0020 00002320 000a 0001 0400 0000 0004 0001 00000000 0000 0001 00010004", ErrMalformed, []string{"nx multipath", "algorithm 4"}},
		{"multipath too few bits", Version15, "ffff0020 00002320 000a 0001 0400 0000 0002 0007 00000000 0000 0001 00010004", ErrMalformed, []string{"8 links do not fit 2 bits"}},
		{"output_reg beyond field", Version15, "ffff0018 00002320 000f 07cf 00010004 ffff 000000000000", ErrMalformed, []string{"nx output_reg", "outside"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := UnmarshalActions(actHex(t, c.hex), c.v)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, c.is) {
				t.Errorf("error %q does not wrap %v", err, c.is)
			}
			if !strings.HasPrefix(err.Error(), "action ") {
				t.Errorf("error %q does not start with the action", err)
			}
			for _, m := range c.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

func TestUnmarshalInstructionsErrors(t *testing.T) {
	cases := []struct {
		name    string
		v       Version
		hex     string
		is      error
		mention []string
	}{
		{"truncated header", Version13, "0001 00", io.ErrUnexpectedEOF, []string{"instruction 0", "header"}},
		{"truncated apply_actions", Version13, "0004 0018 00000000 0000 0010 00000001", io.ErrUnexpectedEOF, []string{"instruction 0 (apply_actions)"}},
		{"length not a multiple of 8", Version13, "0001 000c 05000000 00000000", ErrMalformed, []string{"instruction 0 (goto_table)", "length 12"}},
		{"goto_table too long", Version13, "0001 0010 05000000 00000000 00000000", ErrMalformed, []string{"goto_table", "want 8"}},
		{"write_metadata short", Version13, "0002 0010 00000000 0000000000000005", ErrMalformed, []string{"write_metadata", "want 24"}},
		{"bad action inside", Version15, "0005 0008 00000000 | 0004 0010 00000000 0000 000c 00000001", ErrMalformed, []string{"instruction 1 (apply_actions): action 0 (output): length 12"}},
		{"duplicate goto_table", Version13, "0001 0008 05000000 | 0001 0008 06000000", ErrMalformed, []string{"goto_table twice"}},
		{"duplicate apply of15 with meter", Version15, "0004 0010 00000000 001d0008 00000001 | 0004 0010 00000000 0016 0008 00000001", ErrMalformed, []string{"apply_actions twice"}},
		{"meter action in of13", Version13, "0004 0010 00000000 001d 0008 00000001", nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ins, err := UnmarshalInstructions(actHex(t, c.hex), c.v)
			if c.is == nil {
				// OF1.3 has no meter action: it stays raw.
				if err != nil {
					t.Fatal(err)
				}
				aa := ins[0].(ApplyActions)
				if _, ok := aa.Actions[0].(RawAction); !ok {
					t.Fatalf("meter action in OF1.3 decoded to %#v, want RawAction", aa.Actions[0])
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, got %v", ins)
			}
			if !errors.Is(err, c.is) {
				t.Errorf("error %q does not wrap %v", err, c.is)
			}
			for _, m := range c.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

func TestAppendActionsErrors(t *testing.T) {
	cases := []struct {
		name    string
		v       Version
		acts    []Action
		is      error
		mention string
	}{
		{"nat at top level", Version15, []Action{Output{Port: 1}, NAT{Dst: true, MinAddr: netip.MustParseAddr("10.0.0.1")}}, ErrMalformed, "action 1 (nat): nat outside ct"},
		{"meter action in of13", Version13, []Action{Meter{ID: 1}}, ErrUnsupported, "action 0 (meter)"},
		{"nil action", Version15, []Action{nil}, ErrMalformed, "action 0: nil"},
		{"move with different widths", Version13, []Action{RegMove{Src: actRef("reg0[0..15]"), Dst: actRef("reg1[0..7]")}}, ErrMalformed, "16 bits, destination 8"},
		{"move beyond field", Version15, []Action{RegMove{Src: actRef("reg0"), Dst: actRef("reg1").Bits(16, 32)}}, ErrMalformed, "bits 16..47 outside the 32-bit field"},
		{"load value too wide", Version13, []Action{RegLoad{Dst: actRef("reg0[0..3]"), Value: 0x10}}, ErrMalformed, "does not fit 4 bits"},
		{"load of 65 bits", Version13, []Action{RegLoad{Dst: actRef("ct_label[0..64]"), Value: 1}}, ErrUnsupported, "do not fit ofs_nbits"},
		{"ct output nested", Version15, []Action{CT{Commit: true, RecircTable: CTNoRecirc, Actions: []Action{Output{Port: 1}}}}, ErrMalformed, "action 0 (ct): nested action 0 (output): not allowed inside ct"},
		{"ct set reg nested", Version15, []Action{CT{Commit: true, Actions: []Action{SetField{Field: actField("reg0", []byte{0, 0, 0, 1}, nil)}}}}, ErrMalformed, "ct cannot set reg0"},
		{"ct move into reg nested", Version15, []Action{CT{Commit: true, Actions: []Action{RegMove{Src: actRef("tun_src"), Dst: actRef("reg0")}}}}, ErrMalformed, "ct cannot move into NXM_NX_REG0[]"},
		{"ct move without commit", Version13, []Action{CT{Actions: []Action{RegMove{Src: actRef("tun_src"), Dst: actRef("ct_label[0..31]")}}}}, ErrMalformed, "needs ct(commit)"},
		{"ct exec without commit", Version15, []Action{CT{Actions: []Action{SetField{Field: actField("ct_mark", []byte{0, 0, 0, 1}, nil)}}}}, ErrMalformed, "needs ct(commit)"},
		{"ct force without commit", Version15, []Action{CT{Force: true}}, ErrMalformed, "force needs commit"},
		{"ct zone of 8 bits", Version15, []Action{CT{ZoneSrc: actRef("reg0[0..7]")}}, ErrMalformed, "must be 16 bits"},
		{"nat port without address", Version15, []Action{CT{Commit: true, Actions: []Action{NAT{Dst: true, MinPort: 80}}}}, ErrMalformed, "port range without address range"},
		{"nat mixed families", Version15, []Action{CT{Commit: true, Actions: []Action{NAT{Dst: true, MinAddr: netip.MustParseAddr("10.0.0.1"), MaxAddr: netip.MustParseAddr("fe80::1")}}}}, ErrMalformed, "mixes families"},
		{"conjunction clause zero", Version15, []Action{Conjunction{ID: 1, Clause: 0, NClauses: 2}}, ErrMalformed, "clause 0 of 2"},
		{"raw action bad length", Version15, []Action{RawAction{Data: []byte{0, 0, 0, 8, 0, 0, 0}}}, ErrMalformed, "raw action of 7 bytes"},
		{"learn result_dst of 2 bits", Version15, []Action{Learn{ResultDst: actRef("reg0[0..1]")}}, ErrMalformed, "result_dst: 2 bits"},
		{"learn immediate too wide", Version15, []Action{Learn{Specs: []LearnSpec{LearnMatchValue(actRef("reg0[0..3]"), []byte{1, 0, 0})}}}, ErrMalformed, "spec 0: immediate value"},
		{"learn output of immediate", Version15, []Action{Learn{Specs: []LearnSpec{{Kind: LearnOutput, Value: []byte{0, 1}}}}}, ErrMalformed, "output needs a field source"},
		{"set_field mask width", Version15, []Action{SetField{Field: Field{Class: 1, Field: 0, Value: []byte{0, 0, 0, 1}, Mask: []byte{1}}}}, ErrMalformed, "4-byte value with 1-byte mask"},
		{"multipath too many links", Version15, []Action{Multipath{MaxLink: 4, Dst: actRef("reg0[0..1]")}}, ErrMalformed, "5 links do not fit 2 bits"},
		{"note too long", Version15, []Action{Note{Data: make([]byte, 70000)}}, ErrTooLong, "exceeds 65535"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prefix := []byte{1, 2, 3}
			b, err := AppendActions(prefix, c.v, c.acts)
			if err == nil {
				t.Fatalf("no error; encoded % x", b)
			}
			if !errors.Is(err, c.is) {
				t.Errorf("error %q does not wrap %v", err, c.is)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("error %q does not mention %q", err, c.mention)
			}
			if !bytes.Equal(b, prefix) {
				t.Errorf("buffer changed on error: % x", b)
			}
		})
	}
}

func TestAppendInstructionsErrors(t *testing.T) {
	_, err := AppendInstructions(nil, Version13, []Instruction{GotoTable{Table: 1}, ApplyActions{}, GotoTable{Table: 2}})
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "goto_table twice") {
		t.Errorf("duplicate goto_table: %v", err)
	}
	_, err = AppendInstructions(nil, Version15, []Instruction{ApplyActions{Actions: []Action{Output{Port: 1}, NAT{}}}})
	if !errors.Is(err, ErrMalformed) || err.Error() != "instruction apply_actions: action 1 (nat): nat outside ct: malformed" {
		t.Errorf("nat in apply_actions: %v", err)
	}
	_, err = AppendInstructions(nil, Version13, []Instruction{nil})
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("nil instruction: %v", err)
	}
}

// TestDecodedValuesDoNotAlias mutates the input after decoding: the decoded
// values must not change.
func TestDecodedValuesDoNotAlias(t *testing.T) {
	in := actHex(t, `
		ffff0010 00002320 0008 010203 000000                     note
		ffff0020 00002320 0025 000000000000 0003 0006 0102 0000 0004 0004 00000000   controller2
		0019 0010 80000606 001122334455 0000                     set_field eth_dst
		ffff0010 00002320 00f0 aabbccddeeff                      unknown NX subtype
		ffff0028 00002320 0023 0001 00000000 0000 ff 000000 0000 0019 0010 0001d604 00000001 00000000  ct exec
	`)
	acts, err := UnmarshalActions(in, Version15)
	if err != nil {
		t.Fatal(err)
	}
	want, err := AppendActions(nil, Version15, acts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, in) {
		t.Fatalf("re-encoding differs:\n got % x\nwant % x", want, in)
	}
	for i := range in {
		in[i] ^= 0xff
	}
	got, err := AppendActions(nil, Version15, acts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("decoded actions alias the input")
	}
}

// TestUnknownActionsRoundTrip checks that actions this package does not know
// come back as RawAction and re-encode byte for byte.
func TestUnknownActionsRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		v    Version
		hex  string
	}{
		{"unknown nicira subtype", Version15, "ffff0010 00002320 00f0 000102030405"},
		{"unknown vendor", Version15, "ffff0018 00001234 0001 000000000000 0102030405060708"},
		{"onf experimenter other than copy_field", Version13, "ffff0010 4f4e4600 0c81 000000000000"},
		{"sample", Version15, "ffff0018 00002320 001d ffff 00000001 00000002 00000003"},
		{"clone", Version15, "ffff0020 00002320 002a 000000000000 0000 0010 00000001 0000 000000000000"},
		{"set_mpls_ttl", Version13, "000f 0008 40000000"},
		{"copy_field in of13", Version13, "001c 0018 0010 0000 0010 0000 00010004 00010204 00000000"},
		{"meter action in of13", Version13, "001d 0008 00000001"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := actHex(t, c.hex)
			acts, err := UnmarshalActions(in, c.v)
			if err != nil {
				t.Fatal(err)
			}
			if len(acts) != 1 {
				t.Fatalf("%d actions", len(acts))
			}
			if _, ok := acts[0].(RawAction); !ok {
				t.Fatalf("decoded to %T, want RawAction", acts[0])
			}
			out, err := AppendActions(nil, c.v, acts)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, in) {
				t.Errorf("got % x\nwant % x", out, in)
			}
			if s := acts[0].String(); !strings.HasPrefix(s, "raw(") {
				t.Errorf("String() = %q", s)
			}
		})
	}
	// An experimenter instruction is kept raw as well.
	in := actHex(t, "ffff 0010 00002320 0000000000000000")
	ins, err := UnmarshalInstructions(in, Version13)
	if err != nil {
		t.Fatal(err)
	}
	out, err := AppendInstructions(nil, Version13, ins)
	if err != nil || !bytes.Equal(out, in) {
		t.Errorf("raw instruction: % x, %v", out, err)
	}
	if _, ok := ins[0].(RawInstruction); !ok {
		t.Errorf("decoded to %T", ins[0])
	}
}

// TestActionStrings covers renderings parse-flow cannot produce.
func TestActionStrings(t *testing.T) {
	cases := []struct {
		name string
		a    Action
		want string
	}{
		{"resubmit subtype 1 keeps in_port", Resubmit{InPort: Port16InPort, Table: ResubmitCurrentTable}, "resubmit(,)"},
		{"resubmit ct without table", Resubmit{InPort: 5, Table: ResubmitCurrentTable, CT: true}, "resubmit:5"},
		{"resubmit ct in_port only", Resubmit{InPort: Port16InPort, Table: ResubmitCurrentTable, CT: true}, "resubmit(,,ct)"},
		{"resubmit to ANY", Resubmit{InPort: Port16None, Table: ResubmitCurrentTable}, "resubmit:ANY"},
		{"resubmit UNSET", Resubmit{InPort: 0xfff7, Table: ResubmitCurrentTable}, "resubmit:UNSET"},
		{"empty ct", CT{RecircTable: CTNoRecirc}, "ct()"},
		{"ct unknown alg", CT{Commit: true, RecircTable: CTNoRecirc, Alg: 7}, "ct(commit,alg=7)"},
		{"nat persistent without src", NAT{Persistent: true}, "nat"},
		{"nat src persistent without range", NAT{Src: true, Persistent: true}, "nat(src)"},
		{"controller unknown reason", Controller2{MaxLen: 0xffff, Reason: 9}, "controller(reason=9)"},
		{"controller defaults", ControllerAction(), "CONTROLLER:65535"},
		{"controller zero max_len", Controller2{Reason: PacketInAction}, "CONTROLLER:0"},
		{"note empty", Note{}, "note:00.00.00.00.00.00"},
		{"output with max_len", Output{Port: 3, MaxLen: 64}, "output:3"},
		{"output port 0", Output{Port: 0}, "output:0"},
		{"raw", RawAction{Data: []byte{0, 0x20, 0, 8, 0, 0, 0, 0}}, "raw(0020000800000000)"},
		{"load zero", RegLoad{Dst: actRef("reg0[8..15]")}, "load:0->NXM_NX_REG0[8..15]"},
		{"move one bit", RegMove{Src: actRef("reg0[3]"), Dst: actRef("reg1[31]")}, "move:NXM_NX_REG0[3]->NXM_NX_REG1[31]"},
		{"multipath unknown fields", Multipath{Fields: 9, Algorithm: 9, Dst: actRef("reg0[0..1]")}, "multipath(9,0,9,1,0,NXM_NX_REG0[0..1])"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.a.String(); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
	if got := ActionsString(nil); got != "drop" {
		t.Errorf("ActionsString(nil) = %q", got)
	}
	if got := InstructionsString([]Instruction{ApplyActions{}}); got != "drop" {
		t.Errorf("empty apply_actions = %q", got)
	}
	if got := InstructionsString([]Instruction{WriteActions{}}); got != "write_actions(drop)" {
		t.Errorf("empty write_actions = %q", got)
	}
	if got := InstructionsString([]Instruction{GotoTable{Table: 3}, Meter{ID: 1}, ApplyActions{Actions: []Action{CTClear{}}}}); got != "meter:1,ct_clear,goto_table:3" {
		t.Errorf("instruction order = %q", got)
	}
	if got := (WriteMetadata{Metadata: 5}).String(); got != "write_metadata:0x5/0" {
		t.Errorf("write_metadata zero mask = %q", got)
	}
	if got := WriteMetadataAll(0).String(); got != "write_metadata:0" {
		t.Errorf("write_metadata zero = %q", got)
	}
}

// TestParseFieldRef checks the subfield syntax.
func TestParseFieldRef(t *testing.T) {
	cases := []struct {
		in       string
		ofs, n   int
		str, err string
	}{
		{in: "reg0", ofs: 0, n: 32, str: "NXM_NX_REG0[]"},
		{in: "NXM_NX_REG0[]", ofs: 0, n: 32, str: "NXM_NX_REG0[]"},
		{in: "reg0[5]", ofs: 5, n: 1, str: "NXM_NX_REG0[5]"},
		{in: "reg0[0..15]", ofs: 0, n: 16, str: "NXM_NX_REG0[0..15]"},
		{in: "eth_src[]", ofs: 0, n: 48, str: "NXM_OF_ETH_SRC[]"},
		{in: "tcp_flags", ofs: 0, n: 12, str: "NXM_NX_TCP_FLAGS[]"},
		{in: "metadata[0..63]", ofs: 0, n: 64, str: "OXM_OF_METADATA[]"},
		{in: "reg0[0..32]", err: "outside the 32-bit field"},
		{in: "reg0[3..1]", err: "bad bit range"},
		{in: "reg0[0..15", err: "missing ]"},
		{in: "nosuchfield[0]", err: "unknown field"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			r, err := ParseFieldRef(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Ofs != c.ofs || r.NBits != c.n || r.String() != c.str {
				t.Errorf("got ofs %d n %d %q", r.Ofs, r.NBits, r)
			}
			if w := r.Whole(); w.Ofs != 0 || w.NBits != fieldRefBits(r) {
				t.Errorf("Whole() = %+v", w)
			}
		})
	}
}

// TestMeterInstructionVersions checks that a Meter instruction is OFPIT_METER
// in OF1.3 and a leading meter action in OF1.5, and that both decode back to
// the same Go values.
func TestMeterInstructionVersions(t *testing.T) {
	ins := []Instruction{ApplyActions{Actions: []Action{Output{Port: 1}}}, Meter{ID: 7}}
	cases := []struct {
		v   Version
		hex string
	}{
		{Version13, "0006 0008 00000007 | 0004 0018 00000000 0000 0010 00000001 0000 000000000000"},
		{Version15, "0004 0020 00000000 001d 0008 00000007 0000 0010 00000001 0000 000000000000"},
	}
	for _, c := range cases {
		t.Run(c.v.String(), func(t *testing.T) {
			b, err := AppendInstructions(nil, c.v, ins)
			if err != nil {
				t.Fatal(err)
			}
			if want := actHex(t, c.hex); !bytes.Equal(b, want) {
				t.Fatalf("got % x\nwant % x", b, want)
			}
			got, err := UnmarshalInstructions(b, c.v)
			if err != nil {
				t.Fatal(err)
			}
			want := []Instruction{Meter{ID: 7}, ApplyActions{Actions: []Action{Output{Port: 1}}}}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded %#v", got)
			}
		})
	}
}
