package openflow

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Action is one OpenFlow action: a standard one (output, group, set_field, ...)
// or a Nicira/ONF extension (resubmit, ct, nat, learn, controller2, ...).
//
// String renders the action in ovs-ofctl syntax, exactly as
// `ovs-ofctl -O OpenFlow15 dump-flows` prints it.
type Action interface {
	// appendAction appends the encoded action, padded to a multiple of 8.
	appendAction(b []byte, v Version) ([]byte, error)
	String() string
}

// Action types (OFPAT_*) this package encodes. OF1.3 and OF1.5 share these
// numbers; COPY_FIELD and METER exist only in OF1.5.
const (
	atOutput       uint16 = 0
	atPushVLAN     uint16 = 17
	atPopVLAN      uint16 = 18
	atSetQueue     uint16 = 21
	atGroup        uint16 = 22
	atDecNwTTL     uint16 = 24
	atSetField     uint16 = 25
	atCopyField    uint16 = 28 // OF1.5
	atMeter        uint16 = 29 // OF1.5
	atExperimenter uint16 = 0xffff
)

// AppendActions appends the encoding of acts for version v to b. Every action
// is a multiple of 8 bytes long. On error b is returned unchanged.
func AppendActions(b []byte, v Version, acts []Action) ([]byte, error) {
	start := len(b)
	for i, a := range acts {
		if a == nil {
			return b[:start], fmt.Errorf("action %d: nil action: %w", i, ErrMalformed)
		}
		n := len(b)
		var err error
		b, err = a.appendAction(b, v)
		if err != nil {
			return b[:start], fmt.Errorf("action %d (%s): %w", i, actionName(a), err)
		}
		if (len(b)-n)%8 != 0 || len(b)-n < 8 {
			// Every encoder pads; this guards the invariant.
			panic(fmt.Sprintf("openflow: %T encoded to %d bytes", a, len(b)-n))
		}
	}
	return b, nil
}

// UnmarshalActions decodes b, which must hold exactly one list of actions, as
// sent with version v. Decoded actions never reference b. Truncated input
// gives an error wrapping io.ErrUnexpectedEOF, malformed input one wrapping
// ErrMalformed; both name the action's index and kind, e.g. "action 2 (nx
// ct): nested action 0 (output): not allowed inside ct: malformed". Errors
// carry no package prefix: callers wrap them with the message they belong
// to. Actions this package does not know, or that Open vSwitch does not know
// in version v, decode to RawAction.
func UnmarshalActions(b []byte, v Version) ([]Action, error) {
	return unmarshalActions(b, v, actCtxTop)
}

// actCtx says where an action list is decoded; some actions are valid only
// in some places.
type actCtx uint8

const (
	actCtxTop actCtx = iota // apply_actions, write_actions, packet-out, bucket
	actCtxCT                // nested in ct(): only nat and set_field/load/move into ct_mark/ct_label
)

func unmarshalActions(b []byte, v Version, ctx actCtx) ([]Action, error) {
	var acts []Action
	for i := 0; len(b) > 0; i++ {
		if len(b) < 4 {
			return nil, fmt.Errorf("action %d: header: need 4 bytes, have %d: %w", i, len(b), io.ErrUnexpectedEOF)
		}
		n := int(binary.BigEndian.Uint16(b[2:4]))
		name := rawActionName(b)
		if n < 8 || n%8 != 0 {
			return nil, fmt.Errorf("action %d (%s): length %d is not a positive multiple of 8: %w", i, name, n, ErrMalformed)
		}
		if n > len(b) {
			return nil, fmt.Errorf("action %d (%s): length %d, have %d bytes: %w", i, name, n, len(b), io.ErrUnexpectedEOF)
		}
		a, err := decodeAction(b[:n], v, ctx)
		if err != nil {
			return nil, fmt.Errorf("action %d (%s): %w", i, name, err)
		}
		acts = append(acts, a)
		b = b[n:]
	}
	return acts, nil
}

// decodeAction decodes one action; len(b) is the action's length, a multiple
// of 8 and at least 8.
func decodeAction(b []byte, v Version, ctx actCtx) (Action, error) {
	t := binary.BigEndian.Uint16(b[0:2])
	if t == atExperimenter {
		return decodeExperimenterAction(b, v, ctx)
	}
	if ctx == actCtxCT && t != atSetField && t != atCopyField {
		return nil, fmt.Errorf("not allowed inside ct: %w", ErrMalformed)
	}
	fn := stdDecoders[t]
	if t == atCopyField || t == atMeter {
		if v < Version15 {
			fn = nil
		}
	}
	if fn == nil {
		return RawAction{Data: clone(b)}, nil
	}
	a, err := fn(b, v)
	if err != nil {
		return nil, err
	}
	if ctx == actCtxCT {
		if err := checkCTNested(a); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// decodeExperimenterAction decodes an action of type 0xffff.
func decodeExperimenterAction(b []byte, v Version, ctx actCtx) (Action, error) {
	if len(b) < 16 && binary.BigEndian.Uint32(b[4:8]) == ExperimenterNicira {
		return nil, fmt.Errorf("length %d, a Nicira action needs at least 16: %w", len(b), ErrMalformed)
	}
	exp := binary.BigEndian.Uint32(b[4:8])
	var fn actionDecoder
	switch exp {
	case ExperimenterNicira:
		st := binary.BigEndian.Uint16(b[8:10])
		if ctx == actCtxCT && st != nxastNAT && st != nxastRegLoad && st != nxastRegLoad2 && st != nxastRegMove {
			return nil, fmt.Errorf("not allowed inside ct: %w", ErrMalformed)
		}
		fn = nxDecoders[st]
		if v >= Version15 && (st == nxastRegMove || st == nxastRegLoad || st == nxastRegLoad2) {
			// OF1.5 replaced these with copy_field and masked
			// set_field; Open vSwitch does not know them there.
			fn = nil
		}
	case ExperimenterONF:
		if len(b) >= 16 && binary.BigEndian.Uint16(b[8:10]) == onfCopyField && v < Version15 {
			fn = decodeONFCopyField
		}
	}
	if fn == nil {
		if ctx == actCtxCT {
			return nil, fmt.Errorf("not allowed inside ct: %w", ErrMalformed)
		}
		return RawAction{Data: clone(b)}, nil
	}
	a, err := fn(b, v)
	if err != nil {
		return nil, err
	}
	switch a.(type) {
	case NAT:
		if ctx != actCtxCT {
			return nil, fmt.Errorf("nat outside ct: %w", ErrMalformed)
		}
	default:
		if ctx == actCtxCT {
			if err := checkCTNested(a); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

// actionDecoder decodes one complete action (header included).
type actionDecoder func(b []byte, v Version) (Action, error)

// Decoders by standard type and by Nicira subtype, filled by init functions
// in the files that define the actions.
var (
	stdDecoders = map[uint16]actionDecoder{}
	nxDecoders  = map[uint16]actionDecoder{}
)

// RawAction is an action this package does not decode. Data is the whole
// action, header and padding included; it re-encodes byte for byte.
type RawAction struct {
	Data []byte
}

func (a RawAction) appendAction(b []byte, v Version) ([]byte, error) {
	n := len(a.Data)
	if n < 8 || n%8 != 0 || n > 0xffff || int(binary.BigEndian.Uint16(a.Data[2:4])) != n {
		return b, fmt.Errorf("raw action of %d bytes: %w", n, ErrMalformed)
	}
	return append(b, a.Data...), nil
}

// String renders the raw action as "raw(HEX)". ovs-ofctl has no syntax for
// actions it does not know; it rejects them.
func (a RawAction) String() string {
	return fmt.Sprintf("raw(%s)", hexString(a.Data))
}

// beginAction starts a standard action of type t; endAction fills in its
// length after padding.
func beginAction(b []byte, t uint16) ([]byte, int) {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, t)
	return append(b, 0, 0), start
}

// beginNX starts a Nicira action with the given subtype (10 bytes written:
// type, length placeholder, vendor, subtype).
func beginNX(b []byte, subtype uint16) ([]byte, int) {
	b, start := beginAction(b, atExperimenter)
	b = binary.BigEndian.AppendUint32(b, ExperimenterNicira)
	return binary.BigEndian.AppendUint16(b, subtype), start
}

// endAction pads the action that begins at start to a multiple of 8 and
// writes its length.
func endAction(b []byte, start int) ([]byte, error) {
	b = appendZeros(b, pad8(len(b)-start))
	n := len(b) - start
	if n > 0xffff {
		return b[:start], fmt.Errorf("encoded length %d exceeds 65535: %w", n, ErrTooLong)
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(n))
	return b, nil
}

// rawActionName names an undecoded action by its header for error messages.
func rawActionName(b []byte) string {
	t := binary.BigEndian.Uint16(b[0:2])
	if t != atExperimenter {
		if s, ok := stdActionNames[t]; ok {
			return s
		}
		return fmt.Sprintf("type %d", t)
	}
	if len(b) < 10 {
		return "experimenter"
	}
	exp := binary.BigEndian.Uint32(b[4:8])
	st := binary.BigEndian.Uint16(b[8:10])
	if exp == ExperimenterNicira {
		if s, ok := nxActionNames[st]; ok {
			return "nx " + s
		}
		return fmt.Sprintf("nx subtype %d", st)
	}
	if exp == ExperimenterONF && st == onfCopyField {
		return "onf copy_field"
	}
	return fmt.Sprintf("experimenter 0x%x type %d", exp, st)
}

var stdActionNames = map[uint16]string{
	atOutput: "output", atPushVLAN: "push_vlan", atPopVLAN: "pop_vlan", atSetQueue: "set_queue",
	atGroup: "group", atDecNwTTL: "dec_nw_ttl", atSetField: "set_field", atCopyField: "copy_field",
	atMeter: "meter",
}

var nxActionNames = map[uint16]string{
	nxastResubmit: "resubmit", nxastRegMove: "reg_move", nxastRegLoad: "reg_load", nxastNote: "note",
	nxastMultipath: "multipath", nxastResubmitTable: "resubmit_table", nxastOutputReg: "output_reg",
	nxastLearn: "learn", nxastExit: "exit", nxastController: "controller", nxastDecTTLCntIDs: "dec_ttl_cnt_ids",
	nxastOutputReg2: "output_reg2", nxastRegLoad2: "reg_load2", nxastConjunction: "conjunction",
	nxastCT: "ct", nxastNAT: "nat", nxastController2: "controller2", nxastOutputTrunc: "output_trunc",
	nxastCTClear: "ct_clear", nxastResubmitTableCT: "resubmit_table_ct", nxastLearn2: "learn2",
}

// actionName names an action value for error messages.
func actionName(a Action) string {
	switch a := a.(type) {
	case Output, *Output:
		return "output"
	case Group, *Group:
		return "group"
	case SetField, *SetField:
		return "set_field"
	case PushVLAN, *PushVLAN:
		return "push_vlan"
	case PopVLAN, *PopVLAN:
		return "pop_vlan"
	case DecTTL, *DecTTL:
		return "dec_ttl"
	case SetQueue, *SetQueue:
		return "set_queue"
	case Meter, *Meter:
		return "meter"
	case Resubmit, *Resubmit:
		return "resubmit"
	case RegMove, *RegMove:
		return "move"
	case RegLoad, *RegLoad:
		return "load"
	case CT, *CT:
		return "ct"
	case NAT, *NAT:
		return "nat"
	case Learn, *Learn:
		return "learn"
	case Controller2, *Controller2:
		return "controller"
	case Conjunction, *Conjunction:
		return "conjunction"
	case Note, *Note:
		return "note"
	case CTClear, *CTClear:
		return "ct_clear"
	case OutputReg, *OutputReg:
		return "output_reg"
	case Multipath, *Multipath:
		return "multipath"
	case Exit, *Exit:
		return "exit"
	case RawAction:
		if len(a.Data) >= 4 {
			return "raw " + rawActionName(a.Data)
		}
		return "raw"
	}
	return fmt.Sprintf("%T", a)
}
