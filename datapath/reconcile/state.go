package reconcile

import (
	"encoding/binary"
	"hash/fnv"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// State is what one owner wants on one bridge: flows, groups and meters.
//
// Flows carry no cookie (the reconciler stamps the owner's) and no
// timeouts (a desired flow is permanent). Select-group buckets need a
// non-zero weight and distinct ids. The Store keeps references to the
// slices and the values they point to: do not modify them after Set.
type State struct {
	Flows  []openflow.Flow
	Groups []openflow.GroupEntry
	Meters []openflow.MeterEntry
	// Charge, when set, names the namespace object the state belongs to:
	// a Store with a Budget counts its flows and buckets against the
	// namespace's budget, and holds it back when they do not fit. Nil
	// for state no budget limits.
	Charge *Charge
}

// Empty reports whether s wants nothing.
func (s State) Empty() bool { return len(s.Flows) == 0 && len(s.Groups) == 0 && len(s.Meters) == 0 }

// fingerprint hashes what must be equal for an installed flow to count as
// the desired one, beyond its identity (table, priority, match): the
// feature and owner bits of the cookie (not the generation), the timeouts,
// the flags, the importance and the instructions in ovs-ofctl text, which
// is canonical across encodings.
func fingerprint(f *openflow.Flow, ownerCookie uint64) uint64 {
	h := fnv.New64a()
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], ownerCookie&uint64(plan.OwnerMask))
	binary.BigEndian.PutUint16(b[8:10], f.IdleTimeout)
	binary.BigEndian.PutUint16(b[10:12], f.HardTimeout)
	binary.BigEndian.PutUint16(b[12:14], uint16(f.Flags))
	binary.BigEndian.PutUint16(b[14:16], f.Importance)
	h.Write(b[:])
	h.Write([]byte(openflow.InstructionsString(f.Instructions)))
	// Never 0, which flowEntry uses for "not computed yet".
	return h.Sum64() | 1
}

// wireFingerprint hashes the same as fingerprint, with the instructions
// in this package's own encoding instead of their text: several times
// cheaper, but not canonical (Open vSwitch may give back an action in
// another encoding than the one sent, which decodes to another value).
// Equal wire fingerprints mean equal flows; different ones mean nothing,
// and fingerprint decides. buf is scratch space, returned grown.
func wireFingerprint(f *openflow.Flow, ownerCookie uint64, buf []byte) (uint64, []byte) {
	b, err := openflow.AppendInstructions(buf[:0], openflow.Version15, withoutEmptyApply(f.Instructions))
	if err != nil {
		// Not encodable: never equal by this measure.
		return 0, buf
	}
	return wireSum(ownerCookie, f.IdleTimeout, f.HardTimeout, f.Flags, f.Importance, b), b
}

// wireSum is the wire fingerprint of a flow's owner bits, timeouts, flags,
// importance and encoded instructions.
func wireSum[T []byte | string](ownerCookie uint64, idle, hard uint16, flags openflow.FlowModFlags, importance uint16, ins T) uint64 {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], ownerCookie&uint64(plan.OwnerMask))
	binary.BigEndian.PutUint16(b[8:10], idle)
	binary.BigEndian.PutUint16(b[10:12], hard)
	binary.BigEndian.PutUint16(b[12:14], uint16(flags))
	binary.BigEndian.PutUint16(b[14:16], importance)
	return fnv64a(ins, fnv64a(b[:], fnvOffset)) | 1
}

// fnvOffset is FNV-1a's initial value.
const fnvOffset = 14695981039346656037

// fnv64a continues the FNV-1a hash h (64 bits; fnvOffset to start) over b,
// as hash/fnv does but without its allocation.
func fnv64a[T []byte | string](b T, h uint64) uint64 {
	for i := 0; i < len(b); i++ {
		h ^= uint64(b[i])
		h *= 1099511628211
	}
	return h
}

// withoutEmptyApply returns ins without empty apply-actions instructions,
// which do nothing: a drop flow may be written with one and reads back
// without (both are "actions=drop").
func withoutEmptyApply(ins []openflow.Instruction) []openflow.Instruction {
	empty := func(in openflow.Instruction) bool {
		switch in := in.(type) {
		case openflow.ApplyActions:
			return len(in.Actions) == 0
		case *openflow.ApplyActions:
			return in == nil || len(in.Actions) == 0
		}
		return false
	}
	for i, in := range ins {
		if !empty(in) {
			continue
		}
		out := append([]openflow.Instruction(nil), ins[:i]...)
		for _, in := range ins[i+1:] {
			if !empty(in) {
				out = append(out, in)
			}
		}
		return out
	}
	return ins
}

func stringSum(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// visitActions calls group and meter with every group id and meter id that
// acts reference, looking inside nested action lists (ct exec).
func visitActions(acts []openflow.Action, group, meter func(uint32)) {
	for _, a := range acts {
		switch a := a.(type) {
		case openflow.Group:
			group(a.ID)
		case *openflow.Group:
			group(a.ID)
		case openflow.Meter:
			meter(a.ID)
		case *openflow.Meter:
			meter(a.ID)
		case openflow.Controller2:
			if a.MeterID != 0 {
				meter(a.MeterID)
			}
		case *openflow.Controller2:
			if a.MeterID != 0 {
				meter(a.MeterID)
			}
		case openflow.CT:
			visitActions(a.Actions, group, meter)
		case *openflow.CT:
			visitActions(a.Actions, group, meter)
		}
	}
}

// visitInstructions is visitActions for a flow's instructions, the meter
// instruction included.
func visitInstructions(ins []openflow.Instruction, group, meter func(uint32)) {
	for _, in := range ins {
		switch in := in.(type) {
		case openflow.ApplyActions:
			visitActions(in.Actions, group, meter)
		case *openflow.ApplyActions:
			visitActions(in.Actions, group, meter)
		case openflow.WriteActions:
			visitActions(in.Actions, group, meter)
		case *openflow.WriteActions:
			visitActions(in.Actions, group, meter)
		case openflow.Meter:
			meter(in.ID)
		case *openflow.Meter:
			meter(in.ID)
		}
	}
}

// pack fills e.packed (and its references) from the desired flow f,
// without empty apply-actions (see withoutEmptyApply); buf is scratch
// space.
func (e *flowEntry) pack(f *openflow.Flow, buf *[]byte) error {
	g := *f
	g.Instructions = withoutEmptyApply(f.Instructions)
	p, err := openflow.PackInto(*buf, &g)
	if err != nil {
		return err
	}
	e.packed = p
	e.key = p.Key()
	visitInstructions(g.Instructions, func(id uint32) { e.addRef(refKey{false, id}) }, func(id uint32) { e.addRef(refKey{true, id}) })
	return nil
}

// addRef records one group or meter that e's packed flow uses.
func (e *flowEntry) addRef(k refKey) {
	if e.nrefs == 0 {
		e.ref = k
	}
	if e.nrefs < 255 {
		e.nrefs++
	}
}
