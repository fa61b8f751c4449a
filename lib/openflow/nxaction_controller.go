package openflow

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Packet-in reasons for Controller2.Reason, under the names the action's
// documentation uses; they are the PacketInReason values.
const (
	ControllerReasonNoMatch    = PacketInNoMatch
	ControllerReasonAction     = PacketInAction
	ControllerReasonInvalidTTL = PacketInInvalidTTL
	ControllerReasonActionSet  = PacketInActionSet
	ControllerReasonGroup      = PacketInGroup
	ControllerReasonPacketOut  = PacketInPacketOut
)

var controllerReasonNames = []string{"no_match", "action", "invalid_ttl", "action_set", "group", "packet_out"}

// CONTROLLER2 property types.
const (
	c2PropMaxLen       uint16 = 0
	c2PropControllerID uint16 = 1
	c2PropReason       uint16 = 2
	c2PropUserdata     uint16 = 3
	c2PropPause        uint16 = 4
	c2PropMeterID      uint16 = 5
)

// Controller2 sends the packet to the controller connections with id
// ControllerID as a packet-in with Reason, at most MaxLen bytes of it.
// Userdata and Pause (a continuation) reach only connections that use the
// NXT_PACKET_IN2 format; MeterID (0 = none) rate-limits the packet-ins.
//
// It encodes as NXAST_CONTROLLER2 when Userdata, Pause or MeterID is set and
// as the shorter NXAST_CONTROLLER otherwise, as Open vSwitch does. Both
// decode to Controller2. The plain `controller` of ovs-ofctl (reason action,
// id 0) is an Output to PortController; use OutputPort(PortController).
//
//	NXAST_CONTROLLER:                 NXAST_CONTROLLER2:
//	 0: type, length = 16, vendor      0: type, length, vendor
//	 8: 2 bytes: subtype = 20          8: 2 bytes: subtype = 37
//	10: 2 bytes: max_len              10: 6 bytes: zero
//	12: 2 bytes: controller_id        16: properties: type(2) len(2)
//	14: 1 byte:  reason                   payload, zero pad to 8
//	15: 1 byte:  zero                     (len excludes the padding)
type Controller2 struct {
	MaxLen       uint16
	ControllerID uint16
	Reason       PacketInReason
	Userdata     []byte
	Pause        bool
	MeterID      uint32
}

// ControllerAction returns a Controller2 with ovs-ofctl's defaults: reason
// action, whole packets, controller id 0.
func ControllerAction() Controller2 {
	return Controller2{MaxLen: ControllerMaxLenNoBuffer, Reason: PacketInAction}
}

func (a Controller2) appendAction(b []byte, v Version) ([]byte, error) {
	if len(a.Userdata) == 0 && !a.Pause && a.MeterID == 0 {
		b, start := beginNX(b, nxastController)
		b = binary.BigEndian.AppendUint16(b, a.MaxLen)
		b = binary.BigEndian.AppendUint16(b, a.ControllerID)
		b = append(b, byte(a.Reason), 0)
		return endAction(b, start)
	}
	if len(a.Userdata) > 0xffff-4 {
		return b, fmt.Errorf("userdata of %d bytes: %w", len(a.Userdata), ErrTooLong)
	}
	b, start := beginNX(b, nxastController2)
	b = appendZeros(b, 6)
	prop := func(t uint16, payload ...byte) {
		b = binary.BigEndian.AppendUint16(b, t)
		b = binary.BigEndian.AppendUint16(b, uint16(4+len(payload)))
		b = append(b, payload...)
		b = appendZeros(b, pad8(4+len(payload)))
	}
	if a.MaxLen != ControllerMaxLenNoBuffer {
		prop(c2PropMaxLen, byte(a.MaxLen>>8), byte(a.MaxLen), 0, 0)
	}
	if a.ControllerID != 0 {
		prop(c2PropControllerID, byte(a.ControllerID>>8), byte(a.ControllerID), 0, 0)
	}
	if a.Reason != PacketInAction {
		prop(c2PropReason, byte(a.Reason))
	}
	if len(a.Userdata) > 0 {
		prop(c2PropUserdata, a.Userdata...)
	}
	if a.Pause {
		prop(c2PropPause)
	}
	if a.MeterID != 0 {
		prop(c2PropMeterID, binary.BigEndian.AppendUint32(nil, a.MeterID)...)
	}
	return endAction(b, start)
}

// String renders "CONTROLLER:MAXLEN" when only max_len differs from the
// defaults, else e.g. "controller(reason=no_match,max_len=100,id=5)" or
// "controller(userdata=01.02,pause,meter_id=1)".
func (a Controller2) String() string {
	if a.Reason == PacketInAction && a.ControllerID == 0 && len(a.Userdata) == 0 && !a.Pause && a.MeterID == 0 {
		return fmt.Sprintf("CONTROLLER:%d", a.MaxLen)
	}
	var parts []string
	if a.Reason != PacketInAction {
		if int(a.Reason) < len(controllerReasonNames) {
			parts = append(parts, "reason="+controllerReasonNames[a.Reason])
		} else {
			parts = append(parts, fmt.Sprintf("reason=%d", a.Reason))
		}
	}
	if a.MaxLen != ControllerMaxLenNoBuffer {
		parts = append(parts, fmt.Sprintf("max_len=%d", a.MaxLen))
	}
	if a.ControllerID != 0 {
		parts = append(parts, fmt.Sprintf("id=%d", a.ControllerID))
	}
	if len(a.Userdata) > 0 {
		parts = append(parts, "userdata="+dottedHex(a.Userdata))
	}
	if a.Pause {
		parts = append(parts, "pause")
	}
	if a.MeterID != 0 {
		parts = append(parts, fmt.Sprintf("meter_id=%d", a.MeterID))
	}
	return "controller(" + strings.Join(parts, ",") + ")"
}

func decodeController(b []byte, v Version) (Action, error) {
	if err := fixedLen(b, 16); err != nil {
		return nil, err
	}
	return Controller2{
		MaxLen:       binary.BigEndian.Uint16(b[10:12]),
		ControllerID: binary.BigEndian.Uint16(b[12:14]),
		Reason:       PacketInReason(b[14]),
	}, nil
}

func decodeController2(b []byte, v Version) (Action, error) {
	if !allZero(b[10:16]) {
		return nil, fmt.Errorf("bytes 10..15 must be zero: %w", ErrMalformed)
	}
	a := ControllerAction()
	p := b[16:]
	for len(p) > 0 {
		if len(p) < 4 {
			return nil, fmt.Errorf("property header: %w", ErrMalformed)
		}
		t := binary.BigEndian.Uint16(p[0:2])
		n := int(binary.BigEndian.Uint16(p[2:4]))
		if n < 4 || n+pad8(n) > len(p) {
			return nil, fmt.Errorf("property %d: length %d with %d bytes left: %w", t, n, len(p), ErrMalformed)
		}
		payload := p[4:n]
		p = p[n+pad8(n):]
		want := map[uint16]int{c2PropMaxLen: 2, c2PropControllerID: 2, c2PropReason: 1, c2PropPause: 0, c2PropMeterID: 4}
		if w, ok := want[t]; ok && len(payload) < w {
			return nil, fmt.Errorf("property %d: %d-byte payload: %w", t, len(payload), ErrMalformed)
		}
		switch t {
		case c2PropMaxLen:
			a.MaxLen = binary.BigEndian.Uint16(payload)
		case c2PropControllerID:
			a.ControllerID = binary.BigEndian.Uint16(payload)
		case c2PropReason:
			a.Reason = PacketInReason(payload[0])
		case c2PropUserdata:
			a.Userdata = clone(payload)
		case c2PropPause:
			a.Pause = true
		case c2PropMeterID:
			a.MeterID = binary.BigEndian.Uint32(payload)
		default:
			return nil, fmt.Errorf("unknown property %d: %w", t, ErrMalformed)
		}
	}
	return a, nil
}

func init() {
	nxDecoders[nxastController] = decodeController
	nxDecoders[nxastController2] = decodeController2
}
