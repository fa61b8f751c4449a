package openflow

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"reflect"
	"testing"
)

// actSeed is one instruction list as ovs-ofctl encoded it (see
// action_seeds_test.go, checked against ovs-ofctl by TestActionSeedsCurrent).
type actSeed struct {
	v    Version
	acts string // the actions text given to ovs-ofctl parse-flow
	ins  string // hex of the encoded instructions
}

// actSeedActionLists returns the action lists inside the seeds' apply and
// write actions instructions, found by walking the instruction TLVs.
func actSeedActionLists() (lists [][]byte, versions []Version) {
	for _, s := range actSeeds {
		b, err := hex.DecodeString(s.ins)
		if err != nil {
			panic(err)
		}
		for len(b) >= 8 {
			t := binary.BigEndian.Uint16(b)
			n := int(binary.BigEndian.Uint16(b[2:]))
			if n < 8 || n > len(b) {
				break
			}
			if t == itApplyActions || t == itWriteActions {
				lists = append(lists, b[8:n])
				versions = append(versions, s.v)
			}
			b = b[n:]
		}
	}
	return lists, versions
}

// actCanonicalizes reports whether decoding acts, encoding them for v and
// decoding again may legitimately give different values: a masked set_field
// before OF1.5 encodes as REG_LOADs (as Open vSwitch does), which decode as
// RegLoad.
func actCanonicalizes(acts []Action, v Version) bool {
	for _, a := range acts {
		switch a := a.(type) {
		case SetField:
			if a.Field.Mask != nil && v < Version15 {
				return true
			}
		case CT:
			if actCanonicalizes(a.Actions, v) {
				return true
			}
		}
	}
	return false
}

func actInstructionsCanonicalize(ins []Instruction, v Version) bool {
	for _, i := range ins {
		switch i := i.(type) {
		case ApplyActions:
			if actCanonicalizes(i.Actions, v) {
				return true
			}
		case WriteActions:
			if actCanonicalizes(i.Actions, v) {
				return true
			}
		}
	}
	return false
}

func actFuzzVersion(v15 bool) Version {
	if v15 {
		return Version15
	}
	return Version13
}

// actRoundTripActions is the property both fuzz targets check for actions:
// whatever decodes must encode, the encoding must decode to the same values
// (or, for the canonicalising cases, to values that encode identically) and
// rendering must not panic.
func actRoundTripActions(t *testing.T, v Version, data []byte) {
	acts, err := UnmarshalActions(data, v)
	if err != nil {
		return
	}
	_ = ActionsString(acts)
	enc, err := AppendActions(nil, v, acts)
	if err != nil {
		t.Fatalf("decoded actions do not encode: %v\ninput % x\nactions %s", err, data, ActionsString(acts))
	}
	acts2, err := UnmarshalActions(enc, v)
	if err != nil {
		t.Fatalf("re-encoded actions do not decode: %v\ninput % x\nencoded % x", err, data, enc)
	}
	if !actCanonicalizes(acts, v) && !reflect.DeepEqual(acts, acts2) {
		t.Fatalf("round trip changed the actions\ninput % x\n first %#v\nsecond %#v", data, acts, acts2)
	}
	enc2, err := AppendActions(nil, v, acts2)
	if err != nil || !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding is not stable (%v)\nfirst % x\nsecond % x", err, enc, enc2)
	}
	if ActionsString(acts2) != ActionsString(acts) && !actCanonicalizes(acts, v) {
		t.Fatalf("text changed: %q -> %q", ActionsString(acts), ActionsString(acts2))
	}
}

func FuzzUnmarshalActions(f *testing.F) {
	lists, versions := actSeedActionLists()
	for i, l := range lists {
		f.Add(versions[i] == Version15, l)
	}
	for _, c := range actFuzzCrashers {
		f.Add(c.v15, c.data)
	}
	f.Fuzz(func(t *testing.T, v15 bool, data []byte) {
		actRoundTripActions(t, actFuzzVersion(v15), data)
	})
}

func FuzzUnmarshalInstructions(f *testing.F) {
	for _, s := range actSeeds {
		b, err := hex.DecodeString(s.ins)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s.v == Version15, b)
	}
	f.Fuzz(func(t *testing.T, v15 bool, data []byte) {
		v := actFuzzVersion(v15)
		ins, err := UnmarshalInstructions(data, v)
		if err != nil {
			return
		}
		_ = InstructionsString(ins)
		enc, err := AppendInstructions(nil, v, ins)
		if err != nil {
			t.Fatalf("decoded instructions do not encode: %v\ninput % x\n%s", err, data, InstructionsString(ins))
		}
		ins2, err := UnmarshalInstructions(enc, v)
		if err != nil {
			t.Fatalf("re-encoded instructions do not decode: %v\ninput % x\nencoded % x", err, data, enc)
		}
		if !actInstructionsCanonicalize(ins, v) && !reflect.DeepEqual(ins, ins2) {
			t.Fatalf("round trip changed the instructions\ninput % x\n first %#v\nsecond %#v", data, ins, ins2)
		}
		enc2, err := AppendInstructions(nil, v, ins2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable (%v)\nfirst % x\nsecond % x", err, enc, enc2)
		}
	})
}

// actFuzzCrashers are inputs the fuzzers once failed on; each also runs as
// a named case in TestActionFuzzCrashers.
var actFuzzCrashers = []struct {
	name string
	v15  bool
	data []byte
}{
	{name: "onf experimenter action of 8 bytes", data: []byte("\xff\xff\x00\bONF\x00")},
}

func TestActionFuzzCrashers(t *testing.T) {
	for _, c := range actFuzzCrashers {
		t.Run(c.name, func(t *testing.T) {
			actRoundTripActions(t, actFuzzVersion(c.v15), c.data)
		})
	}
}
