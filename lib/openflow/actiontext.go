package openflow

import (
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"
)

// ActionsString renders acts comma-separated exactly as ovs-ofctl prints an
// action list, or "drop" when acts is empty.
func ActionsString(acts []Action) string {
	if len(acts) == 0 {
		return "drop"
	}
	var sb strings.Builder
	for i, a := range acts {
		if i > 0 {
			sb.WriteByte(',')
		}
		if a == nil {
			sb.WriteString("<nil>")
			continue
		}
		sb.WriteString(a.String())
	}
	return sb.String()
}

// String renders the reference as ovs-ofctl does: NAME[] for the whole
// field, NAME[ofs] for one bit, NAME[ofs..end] otherwise, where NAME is the
// field's NXM/OXM name, e.g. NXM_NX_REG0[0..15].
func (r FieldRef) String() string {
	name := r.fieldName()
	switch {
	case r.Ofs == 0 && r.NBits == fieldRefBits(r):
		return name + "[]"
	case r.NBits == 1:
		return fmt.Sprintf("%s[%d]", name, r.Ofs)
	}
	return fmt.Sprintf("%s[%d..%d]", name, r.Ofs, r.Ofs+r.NBits-1)
}

// cHex formats v as C's "%#x" does: "0" for zero, else 0x-prefixed hex.
func cHex(v uint64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("0x%x", v)
}

// hexBytes formats a big-endian value like cHex, without leading zeros.
func hexBytes(v []byte) string {
	n := new(big.Int).SetBytes(v)
	if n.Sign() == 0 {
		return "0"
	}
	return "0x" + n.Text(16)
}

// dottedHex formats bytes as ovs-ofctl prints notes and userdata: two hex
// digits per byte joined by dots, e.g. "01.02.03".
func dottedHex(p []byte) string {
	var sb strings.Builder
	for i, c := range p {
		if i > 0 {
			sb.WriteByte('.')
		}
		fmt.Fprintf(&sb, "%02x", c)
	}
	return sb.String()
}

// hexString is plain hex.
func hexString(p []byte) string { return hex.EncodeToString(p) }

// reservedPortName32 names the reserved OpenFlow 1.1+ ports that ovs-ofctl
// prints as bare words in actions.
func reservedPortName32(p uint32) (string, bool) {
	switch p {
	case PortInPort:
		return "IN_PORT", true
	case PortTable:
		return "TABLE", true
	case PortNormal:
		return "NORMAL", true
	case PortFlood:
		return "FLOOD", true
	case PortAll:
		return "ALL", true
	case PortController:
		return "CONTROLLER", true
	case PortLocal:
		return "LOCAL", true
	}
	return "", false
}

// port16Name renders a 16-bit port number as ovs-ofctl does.
func port16Name(p uint16) string {
	switch p {
	case 0xfff7:
		return "UNSET"
	case Port16InPort:
		return "IN_PORT"
	case Port16Table:
		return "TABLE"
	case Port16Normal:
		return "NORMAL"
	case Port16Flood:
		return "FLOOD"
	case Port16All:
		return "ALL"
	case Port16Controller:
		return "CONTROLLER"
	case Port16Local:
		return "LOCAL"
	case Port16None:
		return "ANY"
	}
	return fmt.Sprintf("%d", p)
}

// fieldValueText renders f's value, and "/mask" when masked, as set_field
// and learn print it.
func fieldValueText(f Field) string { return FormatFieldValue(f) }
