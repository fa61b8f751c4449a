package openflow

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// CTNoRecirc as CT.RecircTable means the packet does not re-enter the
// pipeline after conntrack.
const CTNoRecirc uint8 = 0xff

// Application layer gateways for CT.Alg.
const (
	CTAlgFTP  uint16 = 21 // needs a tcp match
	CTAlgTFTP uint16 = 69 // needs a udp match
)

// CT flags on the wire.
const (
	ctFlagCommit uint16 = 1 << 0
	ctFlagForce  uint16 = 1 << 1
)

// CT is NXAST_CT: send the packet through the connection tracker.
//
// The zone is the immediate Zone unless ZoneSrc names a field (ZoneSrc.Len
// != 0), whose 16 bits then hold it. RecircTable is the table the packet
// continues in after conntrack, with the ct_* fields filled in; CTNoRecirc
// (0xff) means none, so the zero value recirculates to table 0: set it.
// Actions holds the nested actions: at most NAT, and SetField, RegLoad or
// RegMove into ct_mark and ct_label. Any of those other than an argument-less NAT needs
// Commit.
//
//	 0: 2 bytes: type = 0xffff
//	 2: 2 bytes: length (nested actions included)
//	 4: 4 bytes: vendor = 0x00002320
//	 8: 2 bytes: subtype = 35
//	10: 2 bytes: flags (1 commit, 2 force)
//	12: 4 bytes: zone_src field header, or 0
//	16: 2 bytes: zone_src ? zone ofs_nbits (16 bits) : immediate zone
//	18: 1 byte:  recirc_table (0xff = none)
//	19: 3 bytes: pad
//	22: 2 bytes: alg (0, 21 ftp, 69 tftp)
//	24: nested actions
type CT struct {
	Commit      bool
	Force       bool // needs Commit: end an existing connection in the other direction
	Zone        uint16
	ZoneSrc     FieldRef
	RecircTable uint8
	Alg         uint16
	Actions     []Action
}

func (a CT) appendAction(b []byte, v Version) ([]byte, error) {
	if a.Force && !a.Commit {
		return b, fmt.Errorf("force needs commit: %w", ErrMalformed)
	}
	var flags uint16
	if a.Commit {
		flags |= ctFlagCommit
	}
	if a.Force {
		flags |= ctFlagForce
	}
	b, start := beginNX(b, nxastCT)
	b = binary.BigEndian.AppendUint16(b, flags)
	if a.ZoneSrc.Len != 0 {
		src := nxHeaderFor(a.ZoneSrc)
		if err := src.checkOfsNbits(); err != nil {
			return b[:start], fmt.Errorf("zone: %w", err)
		}
		if src.NBits != 16 || src.Class == 0xffff {
			return b[:start], fmt.Errorf("zone: %s must be 16 bits of an NXM field: %w", src, ErrMalformed)
		}
		b = binary.BigEndian.AppendUint32(b, src.header())
		b = binary.BigEndian.AppendUint16(b, ofsNbits(src.Ofs, src.NBits))
	} else {
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint16(b, a.Zone)
	}
	b = append(b, a.RecircTable, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, a.Alg)
	for i, n := range a.Actions {
		if err := checkCTNested(n); err != nil {
			return b[:start], fmt.Errorf("nested action %d (%s): %w", i, actionName(n), err)
		}
		if err := checkCTCommit(n, a.Commit); err != nil {
			return b[:start], fmt.Errorf("nested action %d (%s): %w", i, actionName(n), err)
		}
		var err error
		if nat, ok := n.(NAT); ok {
			b, err = nat.appendNAT(b)
		} else {
			b, err = n.appendAction(b, v)
		}
		if err != nil {
			return b[:start], fmt.Errorf("nested action %d (%s): %w", i, actionName(n), err)
		}
	}
	return endAction(b, start)
}

// String renders e.g. "ct(commit,table=15,zone=65000,nat(dst=10.128.0.2:8080),exec(set_field:0x2->ct_mark))".
func (a CT) String() string {
	var parts []string
	if a.Commit {
		parts = append(parts, "commit")
	}
	if a.Force {
		parts = append(parts, "force")
	}
	if a.RecircTable != CTNoRecirc {
		parts = append(parts, fmt.Sprintf("table=%d", a.RecircTable))
	}
	if a.ZoneSrc.Len != 0 {
		parts = append(parts, "zone="+a.ZoneSrc.String())
	} else if a.Zone != 0 {
		parts = append(parts, fmt.Sprintf("zone=%d", a.Zone))
	}
	nested := a.Actions
	if len(nested) > 0 {
		if nat, ok := nested[0].(NAT); ok {
			parts = append(parts, nat.String())
			nested = nested[1:]
		}
	}
	if len(nested) > 0 {
		parts = append(parts, "exec("+ActionsString(nested)+")")
	}
	switch a.Alg {
	case 0:
	case CTAlgFTP:
		parts = append(parts, "alg=ftp")
	case CTAlgTFTP:
		parts = append(parts, "alg=tftp")
	default:
		parts = append(parts, fmt.Sprintf("alg=%d", a.Alg))
	}
	return "ct(" + strings.Join(parts, ",") + ")"
}

func decodeCT(b []byte, v Version) (Action, error) {
	if len(b) < 24 {
		return nil, fmt.Errorf("length %d, want at least 24: %w", len(b), ErrMalformed)
	}
	flags := binary.BigEndian.Uint16(b[10:12])
	a := CT{
		Commit:      flags&ctFlagCommit != 0,
		Force:       flags&ctFlagForce != 0,
		RecircTable: b[18],
		Alg:         binary.BigEndian.Uint16(b[22:24]),
	}
	if a.Force && !a.Commit {
		return nil, fmt.Errorf("force without commit: %w", ErrMalformed)
	}
	if binary.BigEndian.Uint32(b[12:16]) != 0 {
		if binary.BigEndian.Uint16(b[12:14]) == 0xffff {
			return nil, fmt.Errorf("zone: experimenter field header does not fit: %w", ErrMalformed)
		}
		src, _, err := pullFieldHeader(b[12:16], "zone")
		if err != nil {
			return nil, err
		}
		src.Ofs, src.NBits = unpackOfsNbits(binary.BigEndian.Uint16(b[16:18]))
		if src.NBits != 16 {
			return nil, fmt.Errorf("zone: %d bits, want 16: %w", src.NBits, ErrMalformed)
		}
		if err := src.check(); err != nil {
			return nil, fmt.Errorf("zone: %w", err)
		}
		a.ZoneSrc = src.canonical()
	} else {
		a.Zone = binary.BigEndian.Uint16(b[16:18])
	}
	nested, err := unmarshalActions(b[24:], v, actCtxCT)
	if err != nil {
		return nil, fmt.Errorf("nested %w", err)
	}
	for i, n := range nested {
		if err := checkCTCommit(n, a.Commit); err != nil {
			return nil, fmt.Errorf("nested action %d (%s): %w", i, actionName(n), err)
		}
	}
	a.Actions = nested
	return a, nil
}

// CT fields that ct(commit, exec(...)) may set.
const (
	ctMarkField  uint8 = 107 // NXM_NX_CT_MARK, class 0x0001
	ctLabelField uint8 = 108 // NXM_NX_CT_LABEL, class 0x0001
)

func isCTMarkOrLabel(class uint16, field uint8) bool {
	return class == 0x0001 && (field == ctMarkField || field == ctLabelField)
}

// checkCTNested checks that a may be nested in a ct action.
func checkCTNested(a Action) error {
	switch a := a.(type) {
	case NAT:
		return nil
	case SetField:
		if isCTMarkOrLabel(a.Field.Class, a.Field.Field) {
			return nil
		}
		return fmt.Errorf("ct cannot set %s: %w", fieldOVSName(a.Field.Class, a.Field.Field, a.Field.Experimenter), ErrMalformed)
	case RegLoad:
		if isCTMarkOrLabel(a.Dst.Class, a.Dst.Field) {
			return nil
		}
		return fmt.Errorf("ct cannot load %s: %w", a.Dst, ErrMalformed)
	case RegMove:
		if isCTMarkOrLabel(a.Dst.Class, a.Dst.Field) {
			return nil
		}
		return fmt.Errorf("ct cannot move into %s: %w", a.Dst, ErrMalformed)
	}
	return fmt.Errorf("not allowed inside ct: %w", ErrMalformed)
}

// checkCTCommit checks that a nested action which needs commit has it.
func checkCTCommit(a Action, commit bool) error {
	if commit {
		return nil
	}
	if nat, ok := a.(NAT); ok && !nat.Src && !nat.Dst {
		return nil
	}
	return fmt.Errorf("needs ct(commit): %w", ErrMalformed)
}

// NAT flags and range_present bits on the wire.
const (
	natFlagSrc        uint16 = 1 << 0
	natFlagDst        uint16 = 1 << 1
	natFlagPersistent uint16 = 1 << 2
	natFlagHash       uint16 = 1 << 3
	natFlagRandom     uint16 = 1 << 4

	natRangeIPv4Min  uint16 = 1 << 0
	natRangeIPv4Max  uint16 = 1 << 1
	natRangeIPv6Min  uint16 = 1 << 2
	natRangeIPv6Max  uint16 = 1 << 3
	natRangeProtoMin uint16 = 1 << 4
	natRangeProtoMax uint16 = 1 << 5
)

// NAT is NXAST_NAT, valid only nested in a CT action. Src or Dst (not both)
// selects source or destination NAT of new connections to an address in
// MinAddr..MaxAddr (MaxAddr invalid: just MinAddr) and a port in
// MinPort..MaxPort (0: unchanged ports; MaxPort 0: just MinPort). A NAT with
// neither Src nor Dst applies the NAT already recorded for the connection.
// Hash and Random choose how ports are picked; they exclude each other.
//
//	 0: type 0xffff, length, vendor
//	 8: 2 bytes: subtype = 36
//	10: 2 bytes: pad
//	12: 2 bytes: flags (src 1, dst 2, persistent 4, hash 8, random 16)
//	14: 2 bytes: range_present (v4 min 1, v4 max 2, v6 min 4, v6 max 8,
//	             port min 16, port max 32)
//	16: present fields in this order: ipv4_min(4) ipv4_max(4) ipv6_min(16)
//	    ipv6_max(16) proto_min(2) proto_max(2), then zero pad
type NAT struct {
	Src, Dst         bool
	MinAddr, MaxAddr netip.Addr
	MinPort, MaxPort uint16
	Persistent       bool
	Hash             bool
	Random           bool
}

// appendAction refuses: NAT is valid only inside CT.
func (a NAT) appendAction(b []byte, v Version) ([]byte, error) {
	return b, fmt.Errorf("nat outside ct: %w", ErrMalformed)
}

func (a NAT) check() error {
	switch {
	case a.Src && a.Dst:
		return fmt.Errorf("both src and dst: %w", ErrMalformed)
	case a.Hash && a.Random:
		return fmt.Errorf("both hash and random: %w", ErrMalformed)
	case a.MaxAddr.IsValid() && !a.MinAddr.IsValid():
		return fmt.Errorf("max address without min: %w", ErrMalformed)
	case a.MinAddr.IsValid() && a.MinAddr.IsUnspecified():
		return fmt.Errorf("min address %s: %w", a.MinAddr, ErrMalformed)
	case a.MinAddr.IsValid() && a.MaxAddr.IsValid() && a.MinAddr.Is4() != a.MaxAddr.Is4():
		return fmt.Errorf("address range %s-%s mixes families: %w", a.MinAddr, a.MaxAddr, ErrMalformed)
	case a.MaxAddr.IsValid() && a.MaxAddr.Less(a.MinAddr):
		return fmt.Errorf("address range %s-%s: %w", a.MinAddr, a.MaxAddr, ErrMalformed)
	case a.MinPort != 0 && !a.MinAddr.IsValid():
		return fmt.Errorf("port range without address range: %w", ErrMalformed)
	case a.MaxPort != 0 && a.MinPort == 0:
		return fmt.Errorf("max port without min: %w", ErrMalformed)
	case a.MaxPort != 0 && a.MaxPort < a.MinPort:
		return fmt.Errorf("port range %d-%d: %w", a.MinPort, a.MaxPort, ErrMalformed)
	}
	return nil
}

// appendNAT appends the NXAST_NAT action.
func (a NAT) appendNAT(b []byte) ([]byte, error) {
	if err := a.check(); err != nil {
		return b, err
	}
	var flags, present uint16
	for _, f := range []struct {
		on  bool
		bit uint16
	}{{a.Src, natFlagSrc}, {a.Dst, natFlagDst}, {a.Persistent, natFlagPersistent}, {a.Hash, natFlagHash}, {a.Random, natFlagRandom}} {
		if f.on {
			flags |= f.bit
		}
	}
	v4 := a.MinAddr.Is4()
	if a.MinAddr.IsValid() {
		present |= pick(v4, natRangeIPv4Min, natRangeIPv6Min)
	}
	if a.MaxAddr.IsValid() {
		present |= pick(v4, natRangeIPv4Max, natRangeIPv6Max)
	}
	if a.MinPort != 0 {
		present |= natRangeProtoMin
	}
	if a.MaxPort != 0 {
		present |= natRangeProtoMax
	}
	b, start := beginNX(b, nxastNAT)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, present)
	if a.MinAddr.IsValid() {
		b = appendAddr(b, a.MinAddr)
	}
	if a.MaxAddr.IsValid() {
		b = appendAddr(b, a.MaxAddr)
	}
	if a.MinPort != 0 {
		b = binary.BigEndian.AppendUint16(b, a.MinPort)
	}
	if a.MaxPort != 0 {
		b = binary.BigEndian.AppendUint16(b, a.MaxPort)
	}
	return endAction(b, start)
}

func pick(c bool, x, y uint16) uint16 {
	if c {
		return x
	}
	return y
}

// String renders e.g. "nat", "nat(src)", "nat(dst=10.0.0.1:80)",
// "nat(src=10.0.0.1-10.0.0.10:1000-2000,random)" or
// "nat(dst=[fe80::1]:80,persistent,hash)".
func (a NAT) String() string {
	if !a.Src && !a.Dst {
		return "nat"
	}
	var sb strings.Builder
	sb.WriteString("nat(")
	if a.Src {
		sb.WriteString("src")
	} else {
		sb.WriteString("dst")
	}
	if a.MinAddr.IsValid() {
		sb.WriteByte('=')
		bracket := a.MinAddr.Is6() && a.MinPort != 0
		writeAddr := func(ip netip.Addr) {
			if bracket {
				sb.WriteString("[" + ip.String() + "]")
			} else {
				sb.WriteString(ip.String())
			}
		}
		writeAddr(a.MinAddr)
		if a.MaxAddr.IsValid() {
			sb.WriteByte('-')
			writeAddr(a.MaxAddr)
		}
		if a.MinPort != 0 {
			fmt.Fprintf(&sb, ":%d", a.MinPort)
			if a.MaxPort != 0 {
				fmt.Fprintf(&sb, "-%d", a.MaxPort)
			}
		}
		if a.Persistent {
			sb.WriteString(",persistent")
		}
		if a.Hash {
			sb.WriteString(",hash")
		}
		if a.Random {
			sb.WriteString(",random")
		}
	}
	sb.WriteByte(')')
	return sb.String()
}

func decodeNAT(b []byte, v Version) (Action, error) {
	flags := binary.BigEndian.Uint16(b[12:14])
	present := binary.BigEndian.Uint16(b[14:16])
	a := NAT{
		Src:        flags&natFlagSrc != 0,
		Dst:        flags&natFlagDst != 0,
		Persistent: flags&natFlagPersistent != 0,
		Hash:       flags&natFlagHash != 0,
		Random:     flags&natFlagRandom != 0,
	}
	if present&(natRangeIPv4Min|natRangeIPv4Max) != 0 && present&(natRangeIPv6Min|natRangeIPv6Max) != 0 {
		return nil, fmt.Errorf("both ipv4 and ipv6 ranges: %w", ErrMalformed)
	}
	p := b[16:]
	take := func(n int, what string) ([]byte, error) {
		if len(p) < n {
			return nil, fmt.Errorf("%s: length %d is too short: %w", what, len(b), ErrMalformed)
		}
		x := p[:n]
		p = p[n:]
		return x, nil
	}
	for _, r := range []struct {
		bit  uint16
		n    int
		dst  *netip.Addr
		what string
	}{
		{natRangeIPv4Min, 4, &a.MinAddr, "ipv4 min"},
		{natRangeIPv4Max, 4, &a.MaxAddr, "ipv4 max"},
		{natRangeIPv6Min, 16, &a.MinAddr, "ipv6 min"},
		{natRangeIPv6Max, 16, &a.MaxAddr, "ipv6 max"},
	} {
		if present&r.bit == 0 {
			continue
		}
		x, err := take(r.n, r.what)
		if err != nil {
			return nil, err
		}
		*r.dst, _ = netip.AddrFromSlice(x)
	}
	for _, r := range []struct {
		bit  uint16
		dst  *uint16
		what string
	}{{natRangeProtoMin, &a.MinPort, "port min"}, {natRangeProtoMax, &a.MaxPort, "port max"}} {
		if present&r.bit == 0 {
			continue
		}
		x, err := take(2, r.what)
		if err != nil {
			return nil, err
		}
		*r.dst = binary.BigEndian.Uint16(x)
		if *r.dst == 0 {
			return nil, fmt.Errorf("%s 0: %w", r.what, ErrMalformed)
		}
	}
	if err := a.check(); err != nil {
		return nil, err
	}
	return a, nil
}

func init() {
	nxDecoders[nxastCT] = decodeCT
	nxDecoders[nxastNAT] = decodeNAT
}

// appendAddr appends a's 4 or 16 bytes to b: netip.Addr.AsSlice would
// allocate them on the heap, once for every DNAT bucket of a cold start.
func appendAddr(b []byte, a netip.Addr) []byte {
	if a.Is4() {
		v := a.As4()
		return append(b, v[:]...)
	}
	v := a.As16()
	return append(b, v[:]...)
}
