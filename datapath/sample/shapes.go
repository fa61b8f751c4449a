package sample

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// Shape is what kind of flow a table holds: a flow with the values that
// vary from node to node and from object to object (addresses, MACs, L4
// ports, group ids, namespace ids) left out, and the plan's own values
// (tables, zones, marks, ct_state, port roles) kept.
type Shape struct {
	Table    plan.TableID
	Priority uint16
	// Match is the match's fields in ovs-ofctl order: protocol shorthands
	// (ip, tcp6, arp), field names, and name=value where the value belongs
	// to the plan (in_port=patch, ct_state=+new+trk, PktSource=FromPod).
	Match string
	// Actions summarises the instructions the same way:
	// "ct(commit,table=40,zone=65000,nat(dst),exec(set SNATKind))".
	Actions string
	// Feature is the feature of the owner that wants the flow.
	Feature plan.Feature
}

// Shapes returns the shapes of bridge b's desired flows, deduplicated and
// sorted by table, priority (highest first), match, actions and feature.
func (d *Desired) Shapes(b plan.Bridge) []Shape {
	seen := map[Shape]bool{}
	var out []Shape
	for _, of := range d.Flows(b) {
		s := Shape{
			Table:    plan.TableID(of.Flow.Table),
			Priority: of.Flow.Priority,
			Match:    d.matchShape(b, of.Flow.Match),
			Actions:  d.actionsShape(b, openflow.InstructionsString(of.Flow.Instructions)),
			Feature:  of.Feature,
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(x, y Shape) int {
		switch {
		case x.Table != y.Table:
			return int(x.Table) - int(y.Table)
		case x.Priority != y.Priority:
			return int(y.Priority) - int(x.Priority)
		case x.Match != y.Match:
			return strings.Compare(x.Match, y.Match)
		case x.Actions != y.Actions:
			return strings.Compare(x.Actions, y.Actions)
		}
		return int(x.Feature) - int(y.Feature)
	})
	return out
}

// splitTop splits s at the commas that are not inside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// keptValues are match fields whose values are the same on every node: a
// shape keeps them.
var keptValues = map[string]bool{
	"ct_state": true, "arp_op": true, "icmp_type": true, "icmp_code": true,
	"icmpv6_type": true, "icmpv6_code": true, "nw_frag": true, "dl_type": true, "nw_proto": true, "ct_nw_proto": true,
}

// regMatch is one register's value and mask in a match.
type regMatch struct{ value, mask uint32 }

// matchShape renders the shape of a match.
func (d *Desired) matchShape(b plan.Bridge, m openflow.Match) string {
	var items []string
	regs := map[int]regMatch{}
	regAt := -1 // where the register items go, in ovs-ofctl order
	for _, it := range splitTop(m.String()) {
		key, val, hasVal := strings.Cut(it, "=")
		switch {
		case !hasVal:
			items = append(items, key)
		case key == "in_port":
			items = append(items, "in_port="+d.portName(b, val))
		case keptValues[key]:
			items = append(items, it)
		case strings.HasPrefix(key, "reg") && isNumber(key[3:]):
			n, _ := strconv.Atoi(key[3:])
			regs[n] = parseValueMask(val, 32)
			if regAt < 0 {
				regAt = len(items)
				items = append(items, "")
			}
		case key == "ct_mark":
			items = append(items, fieldsShape(b, plan.SpaceCtMark, map[int]regMatch{0: parseValueMask(val, 32)}, true)...)
		default:
			items = append(items, key)
		}
	}
	if regAt >= 0 {
		items = slices.Replace(items, regAt, regAt+1, fieldsShape(b, plan.SpaceReg, regs, true)...)
	}
	return strings.Join(items, ",")
}

func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return s != "" && err == nil
}

// parseValueMask parses "0x5/0xf", "0x5" or "5" (an exact match).
func parseValueMask(s string, width int) regMatch {
	v, m, masked := strings.Cut(s, "/")
	value, _ := strconv.ParseUint(v, 0, width)
	mask := uint64(1)<<width - 1
	if masked {
		mask, _ = strconv.ParseUint(m, 0, width)
	}
	return regMatch{uint32(value), uint32(mask)}
}

// fieldsShape names the plan fields of bridge b that the registers (or
// ct_mark, space SpaceCtMark, index 0) cover: with withValue,
// "Field=Mark" when the value is one of the field's marks and "Field=0"
// for zero; else "Field". Bits no field declares are shown raw.
func fieldsShape(b plan.Bridge, space plan.Space, regs map[int]regMatch, withValue bool) []string {
	var out []string
	covered := map[int]uint32{}
	for _, f := range plan.Fields() {
		if f.Bridge() != b {
			continue
		}
		var parts []int // the 32-bit registers the field lies in
		switch {
		case f.Space() == space:
			parts = []int{f.Index()}
		case space == plan.SpaceReg && f.Space() == plan.SpaceXXReg:
			for k := range 4 {
				parts = append(parts, 4*f.Index()+k)
			}
		default:
			continue
		}
		hit := false
		for _, p := range parts {
			if _, ok := regs[p]; ok {
				hit = true
			}
		}
		if !hit {
			continue
		}
		if len(parts) > 1 {
			// A 128-bit field: named, never valued.
			for _, p := range parts {
				covered[p] = ^uint32(0)
			}
			out = append(out, f.Name())
			continue
		}
		r := regs[parts[0]]
		fmask := uint32((uint64(1)<<f.Width() - 1) << f.Start())
		if r.mask&fmask == 0 {
			continue
		}
		covered[parts[0]] |= fmask
		name := f.Name()
		if withValue {
			v := uint64(r.value&fmask) >> f.Start()
			value := ""
			if v == 0 {
				value = "=0"
			}
			for _, mk := range plan.Marks() {
				if mk.Field().Name() == f.Name() && mk.Value() == v {
					value = "=" + mk.Name()
				}
			}
			name += value
		}
		out = append(out, name)
	}
	var idx []int
	for n := range regs {
		idx = append(idx, n)
	}
	slices.Sort(idx)
	for _, n := range idx {
		if rest := regs[n].mask &^ covered[n]; rest != 0 {
			if space == plan.SpaceCtMark {
				out = append(out, fmt.Sprintf("ct_mark&%#x", rest))
			} else {
				out = append(out, fmt.Sprintf("reg%d&%#x", n, rest))
			}
		}
	}
	return out
}

// refShape names an NXM field reference: a plan field's name for the
// register bits it covers, else the field's short name with its bits.
func refShape(b plan.Bridge, ref string) string {
	name, bits, _ := strings.Cut(ref, "[")
	for _, p := range []string{"NXM_OF_", "NXM_NX_", "OXM_OF_"} {
		name = strings.TrimPrefix(name, p)
	}
	name = strings.ToLower(name)
	bits = strings.TrimSuffix(bits, "]")
	space, index := plan.SpaceReg, -1
	switch {
	case strings.HasPrefix(name, "xxreg") && isNumber(name[5:]):
		n, _ := strconv.Atoi(name[5:])
		regs := map[int]regMatch{}
		for k := range 4 {
			regs[4*n+k] = regMatch{0, ^uint32(0)}
		}
		return strings.Join(fieldsShape(b, plan.SpaceReg, regs, false), "+")
	case strings.HasPrefix(name, "reg") && isNumber(name[3:]):
		index, _ = strconv.Atoi(name[3:])
	case name == "ct_mark":
		space, index = plan.SpaceCtMark, 0
	case name == "ct_label" && lowWord(bits):
		// Only ct_label's low 32 bits are named here, as one word.
		space, index = plan.SpaceCtLabel, 0
	}
	if index < 0 {
		if bits != "" {
			return name + "[" + bits + "]"
		}
		return name
	}
	mask := ^uint32(0)
	if lo, hi, ok := strings.Cut(bits, ".."); ok {
		l, _ := strconv.Atoi(lo)
		h, _ := strconv.Atoi(hi)
		mask = uint32((uint64(1)<<(h-l+1) - 1) << l)
	} else if bits != "" {
		l, _ := strconv.Atoi(bits)
		mask = 1 << l
	}
	return strings.Join(fieldsShape(b, space, map[int]regMatch{index: {0, mask}}, false), "+")
}

// lowWord reports whether a bit range "a..b" or "a" lies in bits 0..31.
func lowWord(bits string) bool {
	_, hi, ok := strings.Cut(bits, "..")
	if !ok {
		hi = bits
	}
	h, err := strconv.Atoi(hi)
	return err == nil && h < 32
}

// actionsShape renders the shape of an instruction list in ovs-ofctl text.
// A run of equal actions (an output to every pod) shows once, with "...".
func (d *Desired) actionsShape(b plan.Bridge, acts string) string {
	var out []string
	for _, a := range splitTop(acts) {
		a = d.actionShape(b, a)
		if n := len(out); n > 0 && strings.TrimSuffix(out[n-1], "...") == a {
			out[n-1] = a + "..."
			continue
		}
		out = append(out, a)
	}
	return strings.Join(out, ",")
}

func (d *Desired) actionShape(b plan.Bridge, a string) string {
	switch {
	case strings.HasPrefix(a, "set_field:") || strings.HasPrefix(a, "load:"):
		_, rest, _ := strings.Cut(a, ":")
		val, dst, _ := strings.Cut(rest, "->")
		name, _, _ := strings.Cut(dst, "[")
		switch {
		case strings.HasPrefix(dst, "reg") && isNumber(name[3:]):
			n, _ := strconv.Atoi(name[3:])
			return "set " + strings.Join(fieldsShape(b, plan.SpaceReg, map[int]regMatch{n: parseValueMask(val, 32)}, true), "+")
		case dst == "ct_mark":
			return "set " + strings.Join(fieldsShape(b, plan.SpaceCtMark, map[int]regMatch{0: parseValueMask(val, 32)}, true), "+")
		case strings.HasPrefix(dst, "NXM_") || strings.HasPrefix(dst, "OXM_"):
			return "set " + refShape(b, dst)
		case keptValues[dst]:
			return "set " + dst + "=" + val
		}
		return "set " + dst
	case strings.HasPrefix(a, "move:"):
		src, dst, _ := strings.Cut(strings.TrimPrefix(a, "move:"), "->")
		return "move " + refShape(b, src) + "->" + refShape(b, dst)
	case strings.HasPrefix(a, "output:"):
		port := strings.TrimPrefix(a, "output:")
		if isNumber(port) {
			return "output:" + d.portName(b, port)
		}
		return "output:" + refShape(b, port)
	case strings.HasPrefix(a, "group:"):
		return "group"
	case strings.HasPrefix(a, "ct("):
		return "ct(" + d.ctShape(b, strings.TrimSuffix(strings.TrimPrefix(a, "ct("), ")")) + ")"
	case strings.HasPrefix(a, "learn("):
		for _, it := range splitTop(strings.TrimSuffix(strings.TrimPrefix(a, "learn("), ")")) {
			if strings.HasPrefix(it, "table=") {
				return "learn(" + it + ")"
			}
		}
		return "learn"
	case strings.HasPrefix(a, "controller("):
		s := "controller("
		for _, it := range splitTop(strings.TrimSuffix(strings.TrimPrefix(a, "controller("), ")")) {
			k, v, _ := strings.Cut(it, "=")
			switch k {
			case "userdata":
				cat, _ := strconv.ParseUint(strings.SplitN(v, ".", 2)[0], 16, 8)
				s += packetInName(plan.PacketInCategory(cat)) + ","
			case "meter_id":
				s += it + ","
			}
		}
		return strings.TrimSuffix(s, ",") + ")"
	case strings.HasPrefix(a, "note:"):
		return "note"
	case strings.HasPrefix(a, "meter:"):
		// A per-source meter by its category and its source's role, a
		// namespace's by its category.
		id, err := strconv.ParseUint(strings.TrimPrefix(a, "meter:"), 10, 32)
		if err != nil {
			return a
		}
		if c, _, ok := plan.SplitNamespaceMeter(uint32(id)); ok {
			return "meter(" + packetInName(c) + ",namespace)"
		}
		c, key, ok := plan.SplitSourceMeter(uint32(id))
		if !ok {
			return a
		}
		src := "shared"
		if key != plan.SourceShared {
			src = d.portName(b, strconv.FormatUint(uint64(key), 10))
		}
		return "meter(" + packetInName(c) + "," + src + ")"
	}
	return a
}

// packetInName names a packet-in category as it reads in the document.
func packetInName(c plan.PacketInCategory) string {
	switch c {
	case plan.PacketInUnidle, plan.PacketInReject, plan.PacketInDNS, plan.PacketInPolicyDenied:
		return c.String()
	}
	return fmt.Sprintf("category %d", uint8(c))
}

// ctShape renders the inside of a ct action.
func (d *Desired) ctShape(b plan.Bridge, inner string) string {
	var out []string
	for _, it := range splitTop(inner) {
		switch {
		case strings.HasPrefix(it, "nat("):
			kind, _, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(it, "nat("), ")"), "=")
			out = append(out, "nat("+kind+")")
		case strings.HasPrefix(it, "exec("):
			out = append(out, "exec("+d.actionsShape(b, strings.TrimSuffix(strings.TrimPrefix(it, "exec("), ")"))+")")
		default:
			out = append(out, it)
		}
	}
	return strings.Join(out, ",")
}

// portName names an ofport by its role on bridge b.
func (d *Desired) portName(b plan.Bridge, port string) string {
	n, err := strconv.ParseUint(port, 10, 32)
	if err != nil {
		return port // LOCAL, IN_PORT, ...
	}
	if name, ok := d.ports[b][uint32(n)]; ok {
		return name
	}
	return port
}
