package openflow

import (
	"encoding/binary"
	"fmt"
	"io"
	"unsafe"
)

// FlowStatsView is one entry of a flow stats reply read in place: its
// numbers decoded, its match and instructions left as the bytes of the
// reply. Reading a dump of 100,000 flows this way allocates nothing per
// flow; Decode makes a FlowStats of the entries that need one.
type FlowStatsView struct {
	Table       uint8
	Priority    uint16
	IdleTimeout uint16
	HardTimeout uint16
	Flags       FlowModFlags
	Importance  uint16
	Cookie      uint64
	// Match is the entry's ofp_match, padding included, and Instructions
	// its instructions, both in the reply's memory.
	Match        []byte
	Instructions []byte
	// Version is the reply's version, in which Instructions are encoded.
	Version Version

	entry []byte // the whole entry
	stats []byte // OF1.5: the ofp_stats
}

// EachFlowStats calls fn with each entry of body, the body of a flow stats
// reply of version v (one part's, or several parts' joined), in order. The
// view and the slices in it are valid during the call only. It checks each
// entry's framing (lengths of the entry, the match, the statistics), not
// the fields and instructions inside; Decode and Key check those. It stops
// at the first malformed entry or the first error fn returns, and returns
// that error.
func EachFlowStats(body []byte, v Version, fn func(i int, s *FlowStatsView) error) error {
	if !versionOK(v) {
		return fmt.Errorf("flow stats: %w", errVersion(v))
	}
	fixed := flowStats13Len
	if v >= Version15 {
		fixed = flowStats15Len
	}
	var s FlowStatsView
	for i := 0; len(body) > 0; i++ {
		if len(body) < fixed {
			return need(body, fixed, fmt.Sprintf("flow %d", i))
		}
		n := int(binary.BigEndian.Uint16(body[0:2]))
		if n < fixed || n > len(body) {
			return fmt.Errorf("flow %d: length %d of %d bytes: %w", i, n, len(body), ErrMalformed)
		}
		e := body[:n]
		s = FlowStatsView{Version: v, entry: e}
		if v >= Version15 {
			s.Table = e[4]
			s.Priority = binary.BigEndian.Uint16(e[6:8])
			s.IdleTimeout = binary.BigEndian.Uint16(e[8:10])
			s.HardTimeout = binary.BigEndian.Uint16(e[10:12])
			s.Flags = FlowModFlags(binary.BigEndian.Uint16(e[12:14]))
			s.Importance = binary.BigEndian.Uint16(e[14:16])
			s.Cookie = binary.BigEndian.Uint64(e[16:24])
		} else {
			s.Table = e[2]
			s.Priority = binary.BigEndian.Uint16(e[12:14])
			s.IdleTimeout = binary.BigEndian.Uint16(e[14:16])
			s.HardTimeout = binary.BigEndian.Uint16(e[16:18])
			s.Flags = FlowModFlags(binary.BigEndian.Uint16(e[18:20]))
			if v == Version14 {
				s.Importance = binary.BigEndian.Uint16(e[20:22])
			}
			s.Cookie = binary.BigEndian.Uint64(e[24:32])
		}
		mlen, err := matchSpan(e[fixed:])
		if err != nil {
			return fmt.Errorf("flow %d: match: %w", i, err)
		}
		s.Match = e[fixed : fixed+mlen]
		rest := e[fixed+mlen:]
		if v >= Version15 {
			k, err := oxsSpan(rest)
			if err != nil {
				return fmt.Errorf("flow %d: stats: %w", i, err)
			}
			s.stats, rest = rest[:k], rest[k:]
		}
		s.Instructions = rest
		if err := fn(i, &s); err != nil {
			return err
		}
		body = body[n:]
	}
	return nil
}

// matchSpan returns the size of the ofp_match at the start of b, padding
// included, after checking its header.
func matchSpan(b []byte) (int, error) {
	if len(b) < mfMatchFixedLen {
		return 0, fmt.Errorf("need %d bytes, have %d: %w", mfMatchFixedLen, len(b), io.ErrUnexpectedEOF)
	}
	if typ := binary.BigEndian.Uint16(b); typ != mfMatchTypeOXM {
		return 0, fmt.Errorf("type %d, want %d (OXM): %w", typ, mfMatchTypeOXM, ErrMalformed)
	}
	length := int(binary.BigEndian.Uint16(b[2:]))
	if length < mfMatchFixedLen {
		return 0, fmt.Errorf("length %d: %w", length, ErrMalformed)
	}
	total := length + pad8(length)
	if len(b) < total {
		return 0, fmt.Errorf("length %d (%d padded), have %d bytes: %w", length, total, len(b), io.ErrUnexpectedEOF)
	}
	return total, nil
}

// oxsSpan returns the size of the ofp_stats at the start of b, padding
// included.
func oxsSpan(b []byte) (int, error) {
	if len(b) < oxsStatsHeaderLen {
		return 0, fmt.Errorf("header: %w", io.ErrUnexpectedEOF)
	}
	length := int(binary.BigEndian.Uint16(b[2:4]))
	total := length + pad8(length)
	if length < oxsStatsHeaderLen || total > len(b) {
		return 0, fmt.Errorf("length %d of %d bytes: %w", length, len(b), ErrMalformed)
	}
	return total, nil
}

// Decode returns the entry as a FlowStats, with its own copies of
// everything.
func (s *FlowStatsView) Decode() (FlowStats, error) {
	fs := FlowStats{Flow: Flow{
		Table: s.Table, Priority: s.Priority, Cookie: s.Cookie,
		IdleTimeout: s.IdleTimeout, HardTimeout: s.HardTimeout, Flags: s.Flags, Importance: s.Importance,
	}}
	if s.Version >= Version15 {
		var c oxsCounters
		if _, err := c.unmarshal(s.stats); err != nil {
			return FlowStats{}, fmt.Errorf("stats: %w", err)
		}
		fs.Duration, fs.IdleTime, fs.PacketCount, fs.ByteCount = c.duration, c.idleTime, c.packets, c.bytes
	} else {
		fs.Duration = duration(s.entry[4:12])
		fs.PacketCount = binary.BigEndian.Uint64(s.entry[32:40])
		fs.ByteCount = binary.BigEndian.Uint64(s.entry[40:48])
	}
	m, _, err := UnmarshalMatch(s.Match)
	if err != nil {
		return FlowStats{}, fmt.Errorf("match: %w", err)
	}
	fs.Match = m
	if fs.Instructions, err = UnmarshalInstructions(s.Instructions, s.Version); err != nil {
		return FlowStats{}, fmt.Errorf("instructions: %w", err)
	}
	return fs, nil
}

// RawKey returns a key whose match is the entry's match fields as the
// switch wrote them, in the reply's memory (valid during the call to
// EachFlowStats's fn only). Open vSwitch writes a match in OpenFlow 1.5 in
// the canonical form of FlowKey, so RawKey is then Key, without its work;
// and whatever the form, a key equal to RawKey is the key of the same
// match, since equal bytes decode to equal fields. Look a flow up with
// RawKey first and with Key when that fails.
func (s *FlowStatsView) RawKey() FlowKey {
	fields := s.Match[mfMatchFixedLen:int(binary.BigEndian.Uint16(s.Match[2:4]))]
	return FlowKey{Table: s.Table, Priority: s.Priority, match: unsafe.String(unsafe.SliceData(fields), len(fields))}
}

// Key returns the key of the entry's flow, equal to the one Flow.Key gives
// for the decoded flow, without decoding it: its match is built in buf
// (grown as needed and returned) and valid only until buf is reused. Use
// it to look the flow up; Clone it to keep it.
func (s *FlowStatsView) Key(buf []byte) (FlowKey, []byte, error) {
	var fieldSpace [16]Field
	fields := fieldSpace[:0]
	body := s.Match[mfMatchFixedLen:int(binary.BigEndian.Uint16(s.Match[2:4]))]
	var seen mfSlots
	for i := 0; len(body) > 0; i++ {
		f, n, err := viewOXM(body)
		if err != nil {
			return FlowKey{}, buf, fmt.Errorf("match: oxm %d: %w", i, err)
		}
		if info := mfOf(&f); info != nil {
			if seen.overlaps(&info.slots) {
				return FlowKey{}, buf, fmt.Errorf("match: oxm %d (%s): %w", i, info.Name, errDuplicateField)
			}
			seen.union(&info.slots)
		}
		fields = append(fields, f)
		body = body[n:]
	}
	buf = appendCanonical(buf[:0], fields)
	return FlowKey{Table: s.Table, Priority: s.Priority, match: unsafe.String(unsafe.SliceData(buf), len(buf))}, buf, nil
}
