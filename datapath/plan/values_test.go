package plan

import (
	"slices"
	"testing"

	"nodeflow/lib/openflow"
)

// TestValuesIn checks that the namespace id is found wherever a flow can
// carry it, also after the flow went to the wire and back (OF1.5 turns a
// load into a set_field), and nowhere else.
func TestValuesIn(t *testing.T) {
	match, err := NamespaceID.MatchValue(4242)
	if err != nil {
		t.Fatal(err)
	}
	load, err := NamespaceID.LoadValue(77)
	if err != nil {
		t.Fatal(err)
	}
	other, err := EndpointPort.MatchValue(8080)
	if err != nil {
		t.Fatal(err)
	}
	ref := NamespaceID.Ref()
	fl := &openflow.Flow{Table: 10, Priority: 100,
		Match: openflow.Match{Fields: []openflow.Field{match, other}},
		Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
			load,
			openflow.RegLoad{Dst: ref, Value: 9},
			openflow.RegMove{Src: ref, Dst: ref}, // a move carries no value
		}}}}
	got := values(fl)
	if want := []uint64{9, 77, 4242}; !slices.Equal(got, want) {
		t.Fatalf("ValuesIn = %v, want %v", got, want)
	}

	// Through the wire: the match and the actions decode to other types.
	b, err := fl.Match.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := openflow.UnmarshalMatch(b)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := openflow.AppendInstructions(nil, openflow.Version15, fl.Instructions)
	if err != nil {
		t.Fatal(err)
	}
	ins, err := openflow.UnmarshalInstructions(ib, openflow.Version15)
	if err != nil {
		t.Fatal(err)
	}
	back := &openflow.Flow{Match: m, Instructions: ins}
	if got := values(back); !slices.Equal(got, []uint64{9, 77, 4242}) {
		t.Fatalf("ValuesIn after the wire = %v\n%s", got, back)
	}

	// A mask that covers part of the field says nothing of its value.
	partial := openflow.Reg(NamespaceID.Index(), 5, 0xff)
	if v, ok := NamespaceID.ValueIn(partial); ok {
		t.Fatalf("ValueIn(partial mask) = %d, true", v)
	}
	// The 64-bit register that holds it.
	xv, xm := uint64(33)<<NamespaceID.Start(), uint64(NamespaceID.Max())<<NamespaceID.Start()
	if NamespaceID.Index()%2 == 0 {
		xv, xm = xv<<32, xm<<32
	}
	x := openflow.XReg(NamespaceID.Index()/2, xv, xm)
	if v, ok := NamespaceID.ValueIn(x); !ok || v != 33 {
		t.Fatalf("ValueIn(xreg) = %d, %v; want 33", v, ok)
	}
}

func values(fl *openflow.Flow) []uint64 {
	var out []uint64
	NamespaceID.ValuesIn(fl, func(v uint64) { out = append(out, v) })
	slices.Sort(out)
	return out
}
