package openflow

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// Fuzz targets for the decoders of flow, group, meter, packet and multipart
// messages. Each is a round trip: decode, encode, decode again and encode
// again, and the two encodings must be equal (the first decode may have
// normalised the input: match field order, padding, absent defaults). None
// may panic. The seeds are the captures under testdata/ and encodings of
// the values the other tests use.

// otFuzzFix makes b's header length agree with len(b), so that the fuzzer
// spends its time past the header, and sets the version and type when
// given.
func otFuzzFix(b []byte, v Version, t MsgType) []byte {
	if len(b) < HeaderLen || len(b) > MaxMessageLen {
		return b
	}
	b = bytes.Clone(b)
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	if v != 0 {
		b[0] = byte(v)
	}
	if t != 0xff {
		b[1] = byte(t)
	}
	return b
}

// otRoundTrip decodes b; if it decodes to a message for which ok is true,
// it re-encodes and checks the encoding is stable.
func otRoundTrip(t *testing.T, b []byte, ok func(Message) bool) {
	h, m, err := Unmarshal(b)
	if err != nil || !ok(m) {
		return
	}
	b2, err := Marshal(h.Version, h.Xid, m)
	if otForeignCodecErr(err) {
		return
	}
	if err != nil {
		t.Fatalf("decoded %T from %x but cannot encode it: %v", m, b, err)
	}
	_, m2, err := Unmarshal(b2)
	if err != nil {
		t.Fatalf("re-encoding %x of %x does not decode: %v", b2, b, err)
	}
	b3, err := Marshal(h.Version, h.Xid, m2)
	if err != nil {
		t.Fatalf("second encoding of %x: %v", b, err)
	}
	if !bytes.Equal(b2, b3) {
		t.Fatalf("unstable round trip of %x:\n first %x\nsecond %x", b, b2, b3)
	}
}

// otForeignCodecErr reports an encoding error raised by the match, action
// or instruction codecs, which live in other files and decode some values
// they then refuse to encode (value bits outside a field's valid bits, for
// one). Such inputs end the round trip; every other encoding error of a
// decoded message fails it.
func otForeignCodecErr(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	for _, part := range []string{"match: ", "metadata: ", "actions: ", "instructions: ", "selection field "} {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}

// otSeedMessages are encoded messages of every kind these files decode.
func otSeedMessages(t testing.TB) [][]byte {
	var seeds [][]byte
	add := func(v Version, m Message) {
		b, err := Marshal(v, 1, m)
		if err != nil {
			t.Fatalf("seed %T: %v", m, err)
		}
		seeds = append(seeds, b)
	}
	frame := otHex(t, "000000000002 000000000001 0800 4500001c000000004011 66cf 0a000001 0a000002 03e8 0050 0008 0000")
	for _, v := range []Version{Version13, Version15} {
		f := otCTFlow()
		if v == Version13 {
			f.Importance = 0
		}
		add(v, f.AddMod())
		add(v, Flow{Table: 3, Priority: 7, Match: NewMatch(Reg(0, 5, 0xff), CtState(CtTrk|CtEst, CtTrk|CtEst|CtNew))}.DeleteStrictMod())
		g := otServiceGroup()
		if v == Version13 {
			g.SelectionMethod, g.SelectionFields = "", nil
		}
		add(v, g.AddMod())
		add(v, GroupEntry{ID: 4, Type: GroupTypeFastFailover, Buckets: []Bucket{{WatchPort: 1, WatchGroup: 3, Actions: []Action{Output{Port: 1}}}}}.AddMod())
		add(v, MeterEntry{ID: 2, Flags: MeterFlagKbps | MeterFlagBurst, Bands: []MeterBand{{Type: MeterBandDrop, Rate: 1000, BurstSize: 200}}}.Mod(MeterAdd))
		add(v, &PacketIn{Format: PacketInFormatStandard, BufferID: NoBuffer, TotalLen: 42, Table: 3, Cookie: 9, Match: NewMatch(InPort(1)), Data: frame})
		add(v, &PacketIn{Format: PacketInFormatNXT2, BufferID: NoBuffer, TotalLen: 100, Table: 3, Cookie: 9, Match: NewMatch(InPort(1), Reg(3, 7, 0xffffffff)),
			Data: frame, Userdata: []byte{1, 2, 3}, Continuation: []byte{0x80, 0, 0, 8, 1, 2, 3, 4}})
		add(v, &PacketOut{InPort: PortController, Actions: []Action{Output{Port: PortTable}}, Data: frame})
		add(v, &CtFlushZone{Zone: 5})
		add(v, &CtFlush{Zone: otPtr[uint16](5), IPProto: 6, Orig: CtTuple{Src: otIP("10.0.0.1"), Dst: otIP("fd00::2"), SrcPort: 1000, DstPort: 80}})
		add(v, &CtFlush{IPProto: 1, Reply: CtTuple{ICMPID: 3, ICMPType: 8}})
		add(v, &FlowRemoved{Table: 2, Priority: 7, Cookie: 0x99, Match: NewMatch(InPort(1)), HardTimeout: 1, Reason: FlowRemovedHardTimeout, PacketCount: 3})
		add(v, &PortStatus{Reason: PortModified, Port: otPort()})
		for _, r := range otSeedReplies(t, v) {
			add(v, r)
		}
	}
	add(Version15, &PacketOut{InPort: 3, Match: NewMatch(Reg(0, 5, 0xffffffff)), Actions: []Action{ResubmitTable(10)}, Data: frame})
	add(Version15, &GroupMod{Command: GroupInsertBucket, Type: GroupTypeSelect, GroupID: 3, CommandBucketID: BucketLast,
		Buckets: []Bucket{{ID: 6, Weight: 2, Actions: []Action{Output{Port: 1}}}}})
	add(Version15, &GroupMod{Command: GroupRemoveBucket, Type: GroupTypeSelect, GroupID: 3, CommandBucketID: 5})
	for _, name := range []string{"flowstats_of15.txt", "flowstats_of13.txt", "groupdesc_of15.txt", "groupdesc_of13.txt",
		"packetin2_of15.txt", "packetin_of15.txt", "flowmonitor_of15.txt", "portdesc_of15.txt", "portstatus_of15.txt",
		"flowremoved_of15.txt", "error_of15.txt"} {
		seeds = append(seeds, otLoadFixture(t, name).msgs...)
	}
	return seeds
}

// otSeedReplies are multipart replies of every decoded type.
func otSeedReplies(t testing.TB, v Version) []*MultipartReply {
	var out []*MultipartReply
	add := func(r *MultipartReply, err error) {
		if err != nil {
			t.Fatalf("seed reply: %v", err)
		}
		out = append(out, r)
	}
	f := otCTFlow()
	if v == Version13 {
		f.Importance = 0
	}
	add(NewFlowStatsReply(v, []FlowStats{{Flow: f, PacketCount: 3, ByteCount: 300}, {Flow: Flow{Priority: 1}}}))
	g := otServiceGroup()
	if v == Version13 {
		g.SelectionMethod, g.SelectionFields = "", nil
		g.Buckets[1].ID = 1
	}
	add(NewGroupDescReply(v, []GroupEntry{g}))
	add(NewGroupStatsReply(v, []GroupStats{{GroupID: 2, RefCount: 1, Buckets: []BucketCounter{{1, 2}}}}))
	add(NewPortDescReply(v, []Port{otPort()}))
	add(NewMeterConfigReply(v, []MeterEntry{{ID: 1, Flags: MeterFlagPktps, Bands: []MeterBand{{Type: MeterBandDrop, Rate: 10}}}}))
	add(NewMeterStatsReply(v, []MeterStats{{MeterID: 1, FlowCount: 2, Bands: []BandCounter{{5, 500}}}}))
	if v >= Version14 {
		add(NewFlowMonitorReply(v, []FlowUpdate{
			{Event: FlowUpdateAdded, Table: 7, Priority: 99, Cookie: 0x77, Match: NewMatch(EthType(EthTypeIPv4)), Instructions: otApply(Output{Port: 1})},
			{Event: FlowUpdateAbbrev, Xid: 5}, {Event: FlowUpdatePaused},
		}))
	}
	return out
}

// otSeedOf returns the seeds whose header type is t.
func otSeedOf(t testing.TB, types ...MsgType) [][]byte {
	var out [][]byte
	for _, b := range otSeedMessages(t) {
		for _, ty := range types {
			if MsgType(b[1]) == ty {
				out = append(out, b)
			}
		}
	}
	return out
}

// otFuzzMessage fuzzes the messages of type T, seeded with the captured
// messages of the types given; typ is forced into the fuzzed header
// unless it is 0xff.
func otFuzzMessage[T Message](f *testing.F, typ MsgType, seeds ...MsgType) {
	for _, b := range otSeedOf(f, seeds...) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = otFuzzFix(b, 0, typ)
		otRoundTrip(t, b, func(m Message) bool { _, ok := m.(T); return ok })
	})
}

func FuzzFlowMod(f *testing.F) { otFuzzMessage[*FlowMod](f, TypeFlowMod, TypeFlowMod) }

func FuzzGroupMod(f *testing.F) { otFuzzMessage[*GroupMod](f, TypeGroupMod, TypeGroupMod) }

// FuzzPacketIn covers OFPT_PACKET_IN and NXT_PACKET_IN2.
func FuzzPacketIn(f *testing.F) {
	otFuzzMessage[*PacketIn](f, 0xff, TypePacketIn, TypeExperimenter)
}

// FuzzPacketOut also covers the other small messages: meter mods, ct
// flushes, flow removed and port status.
func FuzzPacketOut(f *testing.F) {
	for _, b := range otSeedOf(f, TypePacketOut, TypeMeterMod, TypeExperimenter, TypeFlowRemoved, TypePortStatus) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = otFuzzFix(b, 0, 0xff)
		otRoundTrip(t, b, func(m Message) bool {
			switch m.(type) {
			case *PacketOut, *MeterMod, *CtFlush, *CtFlushZone, *FlowRemoved, *PortStatus:
				return true
			}
			return false
		})
	})
}

// otReplyRoundTrip decodes a multipart reply's entries with the accessor
// of its type, re-encodes them and checks the encoding is stable.
func otReplyRoundTrip(t *testing.T, r *MultipartReply) {
	v := r.Version
	type codec struct {
		decode func(*MultipartReply) (any, error)
		encode func(any) (*MultipartReply, error)
	}
	codecs := map[MultipartType]codec{
		MultipartFlow: {func(r *MultipartReply) (any, error) { return r.FlowStats() },
			func(x any) (*MultipartReply, error) { return NewFlowStatsReply(v, x.([]FlowStats)) }},
		MultipartGroupDesc: {func(r *MultipartReply) (any, error) { return r.GroupDesc() },
			func(x any) (*MultipartReply, error) { return NewGroupDescReply(v, x.([]GroupEntry)) }},
		MultipartGroup: {func(r *MultipartReply) (any, error) { return r.GroupStats() },
			func(x any) (*MultipartReply, error) { return NewGroupStatsReply(v, x.([]GroupStats)) }},
		MultipartPortDesc: {func(r *MultipartReply) (any, error) { return r.PortDesc() },
			func(x any) (*MultipartReply, error) { return NewPortDescReply(v, x.([]Port)) }},
		MultipartMeterConfig: {func(r *MultipartReply) (any, error) { return r.MeterConfig() },
			func(x any) (*MultipartReply, error) { return NewMeterConfigReply(v, x.([]MeterEntry)) }},
		MultipartMeter: {func(r *MultipartReply) (any, error) { return r.MeterStats() },
			func(x any) (*MultipartReply, error) { return NewMeterStatsReply(v, x.([]MeterStats)) }},
		MultipartFlowMonitor: {func(r *MultipartReply) (any, error) { return r.FlowUpdates() },
			func(x any) (*MultipartReply, error) { return NewFlowMonitorReply(v, x.([]FlowUpdate)) }},
	}
	c, ok := codecs[r.Type]
	if !ok {
		return
	}
	entries, err := c.decode(r)
	if err != nil {
		return
	}
	r2, err := c.encode(entries)
	if otForeignCodecErr(err) {
		return
	}
	if err != nil {
		t.Fatalf("%s: decoded %+v from %x but cannot encode it: %v", r.Type, entries, r.Body, err)
	}
	entries2, err := c.decode(r2)
	if err != nil {
		t.Fatalf("%s: re-encoding %x of %x does not decode: %v", r.Type, r2.Body, r.Body, err)
	}
	r3, err := c.encode(entries2)
	if err != nil {
		t.Fatalf("%s: second encoding: %v", r.Type, err)
	}
	if !bytes.Equal(r2.Body, r3.Body) {
		t.Fatalf("%s: unstable round trip of %x:\n first %x\nsecond %x", r.Type, r.Body, r2.Body, r3.Body)
	}
}

// FuzzMultipartReply covers the framing and every typed reply body (flow
// stats, group desc and stats, port desc, meter config and stats, flow
// monitor updates).
func FuzzMultipartReply(f *testing.F) {
	for _, b := range otSeedOf(f, TypeMultipartReply) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = otFuzzFix(b, 0, TypeMultipartReply)
		otRoundTrip(t, b, func(m Message) bool { _, ok := m.(*MultipartReply); return ok })
		if _, m, err := Unmarshal(b); err == nil {
			if r, ok := m.(*MultipartReply); ok {
				otReplyRoundTrip(t, r)
				if r.Type == MultipartGroupDesc {
					otGroupDescInPlace(t, r)
				}
			}
		}
	})
}

// FuzzFlowUpdates fuzzes flow monitor update lists directly.
func FuzzFlowUpdates(f *testing.F) {
	for _, b := range otSeedOf(f, TypeMultipartReply) {
		if len(b) > 16 && binary.BigEndian.Uint16(b[8:10]) == uint16(MultipartFlowMonitor) {
			f.Add(b[16:])
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		otReplyRoundTrip(t, &MultipartReply{Version: Version15, Type: MultipartFlowMonitor, Body: body})
	})
}

// TestFuzzSeedsDecode makes sure every seed decodes, so that the fuzz
// targets start from valid messages.
func TestFuzzSeedsDecode(t *testing.T) {
	for i, b := range otSeedMessages(t) {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			_, m, err := Unmarshal(b)
			if err != nil {
				t.Fatalf("seed %x: %v", b, err)
			}
			if r, ok := m.(*MultipartReply); ok {
				otReplyRoundTrip(t, r)
				if r.Type == MultipartGroupDesc {
					otGroupDescInPlace(t, r)
				}
			}
			otRoundTrip(t, b, func(Message) bool { return true })
		})
	}
}
