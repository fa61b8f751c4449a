package openflow

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// mcOfpPrint decodes b with `ovs-ofctl ofp-print`, the independent oracle,
// and returns its standard output. Without ovs-ofctl the test is skipped
// (failed when NODEFLOW_REQUIRE_OVS is set).
func mcOfpPrint(t testing.TB, b []byte) string {
	t.Helper()
	return strings.TrimSpace(otOfctl(t, "ofp-print", hex.EncodeToString(b)))
}

// mcDecodeError checks that Unmarshal refuses the message in hex (as
// mcHex reads it) with an error that wraps wantErr and contains wantMsg.
func mcDecodeError(t *testing.T, in string, wantErr error, wantMsg string) {
	t.Helper()
	_, _, err := Unmarshal(mcHex(t, in))
	if !errors.Is(err, wantErr) {
		t.Fatalf("err = %v, want %v", err, wantErr)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("error %q does not contain %q", err, wantMsg)
	}
}

// mcHex parses a hex fixture that may contain spaces, newlines and
// "|"-separated comments at the end of a line.
func mcHex(t testing.TB, s string) []byte {
	t.Helper()
	var clean strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, "|"); i >= 0 {
			line = line[:i]
		}
		clean.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(clean.String())
	if err != nil {
		t.Fatalf("bad hex fixture %q: %v", s, err)
	}
	return b
}

// mcRoundTrip marshals m, unmarshals it and checks that the result equals m
// and re-encodes to the same bytes. It returns the encoding.
func mcRoundTrip(t *testing.T, v Version, xid uint32, m Message) []byte {
	t.Helper()
	b, err := Marshal(v, xid, m)
	if err != nil {
		t.Fatalf("Marshal(%s, %T): %v", v, m, err)
	}
	h, got, err := Unmarshal(b)
	if err != nil {
		t.Fatalf("Unmarshal(%x): %v", b, err)
	}
	if h.Version != v || h.Xid != xid || int(h.Length) != len(b) {
		t.Errorf("header %+v, want version %s xid %d length %d", h, v, xid, len(b))
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("round trip of %T:\n got %#v\nwant %#v", m, got, m)
	}
	b2, err := Marshal(v, xid, got)
	if err != nil {
		t.Fatalf("re-Marshal: %v", err)
	}
	if !bytes.Equal(b, b2) {
		t.Errorf("re-encoding differs:\n %x\n %x", b, b2)
	}
	return b
}

var defaultAsync13 = AsyncConfig{
	PacketIn:    AsyncMasks{Primary: 0x3},
	PortStatus:  AsyncMasks{Primary: 0x7, Secondary: 0x7},
	FlowRemoved: AsyncMasks{Primary: 0xf},
}

const asyncText = ` primary:
       PACKET_IN: no_match action
     PORT_STATUS: add delete modify
    FLOW_REMOVED: idle hard delete group_delete
     ROLE_STATUS: (off)
    TABLE_STATUS: (off)
  REQUESTFORWARD: (off)

 secondary:
       PACKET_IN: (off)
     PORT_STATUS: add delete modify
    FLOW_REMOVED: (off)
     ROLE_STATUS: (off)
    TABLE_STATUS: (off)
  REQUESTFORWARD: (off)`

// connMessageCases are encoded for each version, printed by ovs-ofctl and
// compared with want (with %V replaced by the version, e.g. "OF1.5").
var connMessageCases = []struct {
	name     string
	versions []Version
	msg      Message
	want     string
}{
	{"hello with bitmap", nil, NewHello(Version13, Version15),
		"OFPT_HELLO (%V) (xid=0x55):\n version bitmap: 0x04, 0x06"},
	{"echo request with payload", nil, &EchoRequest{Data: []byte("abc")},
		"OFPT_ECHO_REQUEST (%V) (xid=0x55): 3 bytes of payload\n00000000  61 62 63                                        |abc             |"},
	{"echo reply empty", nil, &EchoReply{},
		"OFPT_ECHO_REPLY (%V) (xid=0x55): 0 bytes of payload"},
	{"features request", nil, &FeaturesRequest{}, "OFPT_FEATURES_REQUEST (%V) (xid=0x55):"},
	{"features reply", nil, &FeaturesReply{DatapathID: 0xfec8517d0247, NTables: 254, Capabilities: 0x4f},
		"OFPT_FEATURES_REPLY (%V) (xid=0x55): dpid:0000fec8517d0247\nn_tables:254, n_buffers:0\ncapabilities: FLOW_STATS TABLE_STATS PORT_STATS GROUP_STATS QUEUE_STATS"},
	{"get config request", nil, &GetConfigRequest{}, "OFPT_GET_CONFIG_REQUEST (%V) (xid=0x55):"},
	{"get config reply", nil, &GetConfigReply{MissSendLen: 128},
		"OFPT_GET_CONFIG_REPLY (%V) (xid=0x55): frags=normal miss_send_len=128"},
	{"set config", nil, &SetConfig{Flags: ConfigFragDrop, MissSendLen: MissSendLenNoBuffer},
		"OFPT_SET_CONFIG (%V) (xid=0x55): frags=drop miss_send_len=65535"},
	{"barrier request", nil, &BarrierRequest{}, "OFPT_BARRIER_REQUEST (%V) (xid=0x55):"},
	{"barrier reply", nil, &BarrierReply{}, "OFPT_BARRIER_REPLY (%V) (xid=0x55):"},
	{"role request", nil, &RoleRequest{Role: RolePrimary, GenerationID: 7},
		"OFPT_ROLE_REQUEST (%V) (xid=0x55): role=primary generation_id=7"},
	{"role reply", nil, &RoleReply{Role: RoleSecondary, GenerationID: 9},
		"OFPT_ROLE_REPLY (%V) (xid=0x55): role=secondary generation_id=9"},
	{"get async request", nil, &GetAsyncRequest{}, "OFPT_GET_ASYNC_REQUEST (%V) (xid=0x55):"},
	{"get async reply", nil, &GetAsyncReply{Config: defaultAsync13},
		"OFPT_GET_ASYNC_REPLY (%V) (xid=0x55):\n" + asyncText},
	{"set async", nil, &SetAsync{Config: defaultAsync13},
		"OFPT_SET_ASYNC (%V) (xid=0x55):\n" + asyncText},
	{"set async with OF1.5 packet-in reasons", []Version{Version15}, &SetAsync{Config: AsyncConfig{
		PacketIn: AsyncMasks{Primary: 0x3b}, PortStatus: AsyncMasks{Primary: 7, Secondary: 7}, FlowRemoved: AsyncMasks{Primary: 0x3f},
		RoleStatus: &AsyncMasks{Secondary: 1}}},
		`OFPT_SET_ASYNC (%V) (xid=0x55):
 primary:
       PACKET_IN: no_match action action_set group packet_out
     PORT_STATUS: add delete modify
    FLOW_REMOVED: idle hard delete group_delete meter_delete eviction
     ROLE_STATUS: (off)
    TABLE_STATUS: (off)
  REQUESTFORWARD: (off)

 secondary:
       PACKET_IN: (off)
     PORT_STATUS: add delete modify
    FLOW_REMOVED: (off)
     ROLE_STATUS: primary_request
    TABLE_STATUS: (off)
  REQUESTFORWARD: (off)`},
	{"nxt set async config", nil, &NXSetAsyncConfig{Config: defaultAsync13},
		"NXT_SET_ASYNC_CONFIG (%V) (xid=0x55):\n" + asyncText},
	{"nxt set async config2", []Version{Version13}, &NXSetAsyncConfig2{Config: AsyncConfig{PacketIn: AsyncMasks{Primary: 3}, RoleStatus: &AsyncMasks{Secondary: 1}}},
		"NXT_SET_ASYNC_CONFIG2 (%V) (xid=0x55):\n primary:\n       PACKET_IN: no_match action\n     PORT_STATUS: (off)\n    FLOW_REMOVED: (off)\n     ROLE_STATUS: (off)\n    TABLE_STATUS: (off)\n  REQUESTFORWARD: (off)\n\n secondary:\n       PACKET_IN: (off)\n     PORT_STATUS: (off)\n    FLOW_REMOVED: (off)\n     ROLE_STATUS: primary_request\n    TABLE_STATUS: (off)\n  REQUESTFORWARD: (off)"},
	{"nxt set packet-in format", nil, &NXSetPacketInFormat{Format: PacketInFormatNXT2},
		"NXT_SET_PACKET_IN_FORMAT (%V) (xid=0x55): format=nxt_packet_in2"},
	{"nxt set controller id", nil, &NXSetControllerID{ID: 7},
		"NXT_SET_CONTROLLER_ID (%V) (xid=0x55): id=7"},
}

func TestConnMessagesOfpPrint(t *testing.T) {
	for _, tc := range connMessageCases {
		versions := tc.versions
		if versions == nil {
			versions = []Version{Version13, Version15}
		}
		for _, v := range versions {
			t.Run(tc.name+" "+v.String(), func(t *testing.T) {
				b := mcRoundTrip(t, v, 0x55, tc.msg)
				want := strings.ReplaceAll(tc.want, "%V", v.String())
				if got := mcOfpPrint(t, b); got != want {
					t.Errorf("ovs-ofctl ofp-print %x:\n got %q\nwant %q", b, got, want)
				}
			})
		}
	}
}

// TestConnMessagesBytes pins encodings that the wire reference captured from
// OVS 3.1.
func TestConnMessagesBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    Version
		xid  uint32
		msg  Message
		want string
	}{
		{"client hello for OF1.3", Version13, 0, NewHello(Version13), `
			04 00 00 10 00 00 00 00 | version 4, type 0, length 16
			00 01 00 08 00 00 00 10 | VERSIONBITMAP, length 8, bitmap 1<<4`},
		{"hello offering OF1.3 and OF1.5", Version15, 1, NewHello(Version15, Version13), `
			06 00 00 10 00 00 00 01
			00 01 00 08 00 00 00 50 | bits 4 and 6`},
		{"set config no buffer", Version13, 0, &SetConfig{MissSendLen: 0xffff}, `
			04 09 00 0c 00 00 00 00 00 00 ff ff`},
		{"set controller id", Version13, 0, &NXSetControllerID{ID: 5}, `
			04 04 00 18 00 00 00 00 | experimenter
			00 00 23 20 00 00 00 14 | Nicira, subtype 20
			00 00 00 00 00 00 00 05 | zero(6), id`},
		{"set packet-in format", Version13, 0, &NXSetPacketInFormat{Format: PacketInFormatNXT2}, `
			04 04 00 14 00 00 00 00 00 00 23 20 00 00 00 10 00 00 00 02`},
		{"OF1.3 set async enabling no-match and action", Version13, 0, &SetAsync{Config: defaultAsync13}, `
			04 1c 00 20 00 00 00 00
			00 00 00 03 00 00 00 00 | packet_in primary, secondary
			00 00 00 07 00 00 00 07 | port_status
			00 00 00 0f 00 00 00 00 | flow_removed`},
		{"OF1.5 set async properties", Version15, 0, &SetAsync{Config: AsyncConfig{PacketIn: AsyncMasks{Primary: 3}}}, `
			06 1c 00 38 00 00 00 00
			00 00 00 08 00 00 00 00 | PACKET_IN_SLAVE
			00 01 00 08 00 00 00 03 | PACKET_IN_MASTER
			00 02 00 08 00 00 00 00 | PORT_STATUS_SLAVE
			00 03 00 08 00 00 00 00 | PORT_STATUS_MASTER
			00 04 00 08 00 00 00 00 | FLOW_REMOVED_SLAVE
			00 05 00 08 00 00 00 00 | FLOW_REMOVED_MASTER`},
		{"role request", Version13, 0, &RoleRequest{Role: RolePrimary}, `
			04 18 00 18 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00 00 00 00 00 00`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Marshal(tc.v, tc.xid, tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			if want := mcHex(t, tc.want); !bytes.Equal(got, want) {
				t.Errorf("got  %x\nwant %x", got, want)
			}
		})
	}
}

// TestDecodeCapturedConnMessages decodes messages that OVS 3.1 sent.
func TestDecodeCapturedConnMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Message
	}{
		{"OVS hello without bitmap", "06 00 00 08 00 00 00 01", &Hello{}},
		{"OVS hello for protocols=OpenFlow13", "04 00 00 10 00 00 00 02 00 01 00 08 00 00 00 10", &Hello{Bitmap: []uint32{0x10}}},
		{"features reply", `
			04 06 00 20 00 00 00 07
			00 00 fe c8 51 7d 02 47 | datapath id
			00 00 00 00 fe 00 00 00 | n_buffers, n_tables, aux, pad
			00 00 00 4f 00 00 00 00 | capabilities, reserved`,
			&FeaturesReply{DatapathID: 0xfec8517d0247, NTables: 0xfe, Capabilities: 0x4f}},
		{"get config reply on fresh mgmt connection", "04 08 00 0c 00 00 00 03 00 00 00 00", &GetConfigReply{}},
		{"OF1.3 get async reply defaults", `
			04 1b 00 20 00 00 00 04
			00 00 00 03 00 00 00 00 00 00 00 07 00 00 00 07 00 00 00 0f 00 00 00 00`,
			&GetAsyncReply{Config: defaultAsync13}},
		{"role reply", "04 19 00 18 00 00 00 05 00 00 00 02 00 00 00 00 00 00 00 00 00 00 00 00",
			&RoleReply{Role: RolePrimary}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got, err := Unmarshal(mcHex(t, tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestHelloDecode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    *Hello
		wantErr error
	}{
		{"two bitmap words", "06 00 00 18 00 00 00 00 00 01 00 0c 00 00 00 50 00 00 00 01 00 00 00 00",
			&Hello{Bitmap: []uint32{0x50, 1}}, nil},
		{"unknown element kept", "06 00 00 18 00 00 00 00 00 07 00 05 aa 00 00 00 00 01 00 08 00 00 00 40",
			&Hello{Bitmap: []uint32{0x40}, Elements: []HelloElement{{Type: 7, Data: []byte{0xaa}}}}, nil},
		{"last element unpadded", "06 00 00 0d 00 00 00 00 00 07 00 05 aa",
			&Hello{Elements: []HelloElement{{Type: 7, Data: []byte{0xaa}}}}, nil},
		{"element length below 4", "06 00 00 10 00 00 00 00 00 01 00 02 00 00 00 00", nil, ErrMalformed},
		{"element past the end", "06 00 00 10 00 00 00 00 00 01 00 10 00 00 00 10", nil, io.ErrUnexpectedEOF},
		{"bitmap not whole words", "06 00 00 10 00 00 00 00 00 01 00 06 00 10 00 00", nil, ErrMalformed},
		{"empty bitmap", "06 00 00 10 00 00 00 00 00 01 00 04 00 00 00 00", nil, ErrMalformed},
		{"half an element header", "06 00 00 0a 00 00 00 00 00 01", nil, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, m, err := Unmarshal(mcHex(t, tc.in))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "hello") {
					t.Errorf("error %q does not name the message", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, tc.want) {
				t.Errorf("got %#v, want %#v", m, tc.want)
			}
		})
	}
}

func TestNegotiateVersion(t *testing.T) {
	ours := []Version{Version15, Version13}
	for _, tc := range []struct {
		name   string
		hv     Version
		peer   *Hello
		want   Version
		wantOK bool
	}{
		{"OVS default protocols (no bitmap, OF1.5)", Version15, &Hello{}, Version15, true},
		{"OVS protocols=OpenFlow13", Version13, &Hello{Bitmap: []uint32{1 << 4}}, Version13, true},
		{"OVS protocols=OpenFlow13,OpenFlow15", Version15, &Hello{Bitmap: []uint32{1<<4 | 1<<6}}, Version15, true},
		{"peer OF1.4 without bitmap gets OF1.3", Version14, &Hello{}, Version13, true},
		{"peer OF1.4 only", Version14, &Hello{Bitmap: []uint32{1 << 5}}, 0, false},
		{"peer OF1.0 only", Version10, nil, 0, false},
		{"peer newer than OF1.5 without bitmap", 0x07, &Hello{}, Version15, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := NegotiateVersion(ours, tc.hv, tc.peer)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("got %s %v, want %s %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestConnMessageDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		wantErr error
		wantMsg string
	}{
		{"features reply short", "04 06 00 10 00 00 00 00 00 00 00 00 00 00 00 01", io.ErrUnexpectedEOF, "features reply"},
		{"features reply long", "04 06 00 24 00 00 00 00" + strings.Repeat(" 00", 28), ErrMalformed, "features reply"},
		{"set config short", "04 09 00 0a 00 00 00 00 00 00", io.ErrUnexpectedEOF, "set config"},
		{"barrier with body", "04 14 00 09 00 00 00 00 00", ErrMalformed, "barrier request"},
		{"role request short", "04 18 00 0c 00 00 00 00 00 00 00 02", io.ErrUnexpectedEOF, "role request"},
		{"OF1.3 set async short", "04 1c 00 0c 00 00 00 00 00 00 00 03", io.ErrUnexpectedEOF, "set async"},
		{"OF1.5 async property with wrong length", "06 1c 00 18 00 00 00 00 00 01 00 0c 00 00 00 03 00 00 00 00 00 00 00 00", ErrMalformed, "set async: property 0 (type 1)"},
		{"OF1.5 async property truncated", "06 1c 00 0c 00 00 00 00 00 01 00 08", io.ErrUnexpectedEOF, "set async: property 0"},
		{"OF1.5 async property length below 4", "06 1c 00 10 00 00 00 00 00 01 00 00 00 00 00 03", ErrMalformed, "length 0"},
		{"controller id with non-zero pad", "04 04 00 18 00 00 00 00 00 00 23 20 00 00 00 14 00 00 00 00 01 00 00 07", ErrMalformed, "nxt set controller id: byte 4"},
		{"packet-in format long", "04 04 00 18 00 00 00 00 00 00 23 20 00 00 00 10 00 00 00 02 00 00 00 00", ErrMalformed, "nxt set packet-in format"},
	} {
		t.Run(tc.name, func(t *testing.T) { mcDecodeError(t, tc.in, tc.wantErr, tc.wantMsg) })
	}
}

func TestAsyncConfigPropertyForm(t *testing.T) {
	t.Run("fixed layout refuses OF1.4-only masks", func(t *testing.T) {
		_, err := Marshal(Version13, 1, &SetAsync{Config: AsyncConfig{TableStatus: &AsyncMasks{Primary: 1}}})
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("err = %v, want ErrUnsupported", err)
		}
	})
	t.Run("unknown and experimenter properties are skipped", func(t *testing.T) {
		in := mcHex(t, `
			06 1c 00 28 00 00 00 00
			00 01 00 08 00 00 00 03 | PACKET_IN_MASTER = 3
			00 40 00 05 01 00 00 00 | unknown type 64, length 5, padded
			ff ff 00 0c 00 00 23 20 | experimenter property, length 12
			00 00 00 01 00 00 00 00 | ... and its padding`)
		_, m, err := Unmarshal(in)
		if err != nil {
			t.Fatal(err)
		}
		want := &SetAsync{Config: AsyncConfig{PacketIn: AsyncMasks{Primary: 3}}}
		if !reflect.DeepEqual(m, want) {
			t.Errorf("got %#v, want %#v", m, want)
		}
	})
	t.Run("all six kinds round trip", func(t *testing.T) {
		c := AsyncConfig{
			PacketIn: AsyncMasks{1, 2}, PortStatus: AsyncMasks{3, 4}, FlowRemoved: AsyncMasks{5, 6},
			RoleStatus: &AsyncMasks{7, 8}, TableStatus: &AsyncMasks{9, 10}, RequestForward: &AsyncMasks{11, 12},
		}
		mcRoundTrip(t, Version15, 9, &GetAsyncReply{Config: c})
		mcRoundTrip(t, Version13, 9, &NXSetAsyncConfig2{Config: c})
	})
}

// connFuzzSeeds are whole messages of the types msg_conn.go decodes.
func connFuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, tc := range connMessageCases {
		for _, v := range []Version{Version13, Version15} {
			if b, err := Marshal(v, 1, tc.msg); err == nil {
				seeds = append(seeds, b)
			}
		}
	}
	return seeds
}

// mcFuzzRoundTrip decodes b; when that succeeds it re-encodes the message
// with the same version and xid, decodes again and compares.
func mcFuzzRoundTrip(t *testing.T, b []byte) {
	h, m, err := Unmarshal(b)
	if err != nil {
		return
	}
	switch m.(type) {
	case *Hello, *EchoRequest, *EchoReply, *FeaturesRequest, *FeaturesReply, *GetConfigRequest,
		*GetConfigReply, *SetConfig, *BarrierRequest, *BarrierReply, *RoleRequest, *RoleReply,
		*GetAsyncRequest, *GetAsyncReply, *SetAsync, *NXSetAsyncConfig, *NXSetAsyncConfig2,
		*NXSetPacketInFormat, *NXSetControllerID, *OFError, *BundleControl:
	default:
		// Other files' messages have their own fuzz targets.
		return
	}
	b2, err := Marshal(h.Version, h.Xid, m)
	if err != nil {
		// Some decoded values cannot be re-encoded in the same version
		// (OF1.4-only async masks never decode from OF1.3), so this is a bug.
		t.Fatalf("re-encode %T decoded from %x: %v", m, b, err)
	}
	h2, m2, err := Unmarshal(b2)
	if err != nil {
		t.Fatalf("decode re-encoded %T %x (from %x): %v", m, b2, b, err)
	}
	if h2.Version != h.Version || h2.Type != h.Type || h2.Xid != h.Xid {
		t.Fatalf("header changed: %+v -> %+v", h, h2)
	}
	if !reflect.DeepEqual(m, m2) {
		t.Fatalf("round trip changed %T:\n%#v\n%#v", m, m, m2)
	}
}

func FuzzConnMessage(f *testing.F) {
	for _, s := range connFuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= HeaderLen {
			// Keep the length field consistent so the fuzzer explores bodies.
			b = append([]byte(nil), b...)
			b[2], b[3] = byte(len(b)>>8), byte(len(b))
		}
		mcFuzzRoundTrip(t, b)
	})
}

// FuzzHello feeds arbitrary HELLO bodies.
func FuzzHello(f *testing.F) {
	f.Add(uint8(6), []byte{})
	f.Add(uint8(4), mcHex(f, "00 01 00 08 00 00 00 10"))
	f.Add(uint8(6), mcHex(f, "00 01 00 0c 00 00 00 50 00 00 00 01 00 00 00 00 00 07 00 05 aa"))
	f.Fuzz(func(t *testing.T, v uint8, body []byte) {
		if len(body) > MaxMessageLen-HeaderLen {
			return
		}
		b := Header{Version: Version(v), Type: TypeHello, Length: uint16(HeaderLen + len(body))}.AppendBinary(nil)
		b = append(b, body...)
		mcFuzzRoundTrip(t, b)
		if _, m, err := Unmarshal(b); err == nil {
			h := m.(*Hello)
			NegotiateVersion([]Version{Version15, Version13}, Version(v), h)
		}
	})
}

// FuzzAsyncConfig feeds arbitrary bodies to the four async-config messages.
func FuzzAsyncConfig(f *testing.F) {
	f.Add(uint8(4), uint8(0), mcHex(f, "00 00 00 03 00 00 00 00 00 00 00 07 00 00 00 07 00 00 00 0f 00 00 00 00"))
	f.Add(uint8(6), uint8(1), mcHex(f, "00 01 00 08 00 00 00 03 00 06 00 08 00 00 00 01"))
	f.Add(uint8(4), uint8(2), mcHex(f, "00 00 00 03 00 00 00 00 00 00 00 07 00 00 00 07 00 00 00 0f 00 00 00 00"))
	f.Add(uint8(4), uint8(3), mcHex(f, "00 01 00 08 00 00 00 03 ff ff 00 0c 00 00 23 20 00 00 00 01 00 00 00 00"))
	f.Fuzz(func(t *testing.T, v, which uint8, body []byte) {
		if len(body) > MaxMessageLen-HeaderLen-8 {
			return
		}
		var b []byte
		switch which % 4 {
		case 0:
			b = Header{Version: Version(v), Type: TypeSetAsync}.AppendBinary(nil)
		case 1:
			b = Header{Version: Version(v), Type: TypeGetAsyncReply}.AppendBinary(nil)
		case 2:
			b = Header{Version: Version(v), Type: TypeExperimenter}.AppendBinary(nil)
			b = appendExperimenterPrefix(b, ExperimenterNicira, nxtSetAsyncConfig)
		case 3:
			b = Header{Version: Version(v), Type: TypeExperimenter}.AppendBinary(nil)
			b = appendExperimenterPrefix(b, ExperimenterNicira, nxtSetAsyncConfig2)
		}
		b = append(b, body...)
		b[2], b[3] = byte(len(b)>>8), byte(len(b))
		mcFuzzRoundTrip(t, b)
	})
}
