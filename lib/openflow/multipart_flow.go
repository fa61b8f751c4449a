package openflow

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// FlowStatsRequest asks for the flows of Table (TableAll for every table)
// that match Match loosely (every flow when Match is empty), and optionally
// only those that output to OutPort, use OutGroup, or have the cookie bits
// CookieMask selects equal to Cookie's. Use NewFlowStatsRequest for the
// "everything" defaults. The layout is the same in OF1.3 and OF1.5.
//
//	1 byte: table_id
//	3 bytes: pad
//	4 bytes: out_port
//	4 bytes: out_group
//	4 bytes: pad
//	8 bytes: cookie
//	8 bytes: cookie_mask
//	ofp_match
type FlowStatsRequest struct {
	Table      uint8
	OutPort    uint32
	OutGroup   uint32
	Cookie     uint64
	CookieMask uint64
	Match      Match
}

// NewFlowStatsRequest returns a request for every flow of every table.
func NewFlowStatsRequest() *FlowStatsRequest {
	return &FlowStatsRequest{Table: TableAll, OutPort: PortAny, OutGroup: GroupAny}
}

func (m *FlowStatsRequest) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypeMultipartRequest, b, fmt.Errorf("flow stats request: %w", errVersion(v))
	}
	b = appendMultipartHeader(b, MultipartFlow, 0)
	b = append(b, m.Table, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, m.OutPort)
	b = binary.BigEndian.AppendUint32(b, m.OutGroup)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, m.Cookie)
	b = binary.BigEndian.AppendUint64(b, m.CookieMask)
	b, err := m.Match.AppendBinary(b)
	if err != nil {
		return TypeMultipartRequest, b, fmt.Errorf("flow stats request: match: %w", err)
	}
	return TypeMultipartRequest, b, nil
}

// FlowStats is one entry of a flow stats reply: a flow and its counters.
type FlowStats struct {
	Flow
	// Duration is how long the flow has been installed.
	Duration time.Duration
	// IdleTime is how long ago the flow last matched a packet (OF1.5 only).
	IdleTime    time.Duration
	PacketCount uint64
	ByteCount   uint64
}

// Fixed parts of a flow stats entry.
const (
	flowStats13Len = 48
	flowStats15Len = 24
)

// OXS (OpenFlow eXtensible Statistics) fields of class OFPXSC_OPENFLOW_BASIC.
const (
	oxsClassBasic      = 0x8002
	oxsDuration        = 0 // sec(4) nsec(4)
	oxsIdleTime        = 1 // sec(4) nsec(4)
	oxsFlowCount       = 3 // u32
	oxsPacketCount     = 4 // u64
	oxsByteCount       = 5 // u64
	oxsStatsHeaderLen  = 4 // reserved(2) length(2)
	oxsFieldHeaderSize = 4
)

// unmarshalFlowStats decodes flow stats entries.
//
// OF1.3 (OF1.4 adds importance in the padding at offset 20):
//
//	2 bytes: length
//	1 byte: table_id
//	1 byte: pad
//	4 bytes: duration_sec
//	4 bytes: duration_nsec
//	2 bytes: priority
//	2 bytes: idle_timeout
//	2 bytes: hard_timeout
//	2 bytes: flags
//	2 bytes: importance (OF1.4), pad (OF1.3)
//	2 bytes: pad
//	8 bytes: cookie
//	8 bytes: packet_count
//	8 bytes: byte_count
//	ofp_match
//	instructions
//
// OF1.5:
//
//	2 bytes: length
//	2 bytes: pad
//	1 byte: table_id
//	1 byte: reason
//	2 bytes: priority
//	2 bytes: idle_timeout
//	2 bytes: hard_timeout
//	2 bytes: flags
//	2 bytes: importance
//	8 bytes: cookie
//	ofp_match
//	ofp_stats: reserved(2) length(2) OXS fields, padded to 8
//	instructions
func unmarshalFlowStats(b []byte, v Version) ([]FlowStats, error) {
	var out []FlowStats
	err := EachFlowStats(b, v, func(i int, s *FlowStatsView) error {
		fs, err := s.Decode()
		if err != nil {
			return fmt.Errorf("flow %d: %w", i, err)
		}
		out = append(out, fs)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// oxsCounters are the values of an ofp_stats.
type oxsCounters struct {
	duration, idleTime time.Duration
	flowCount          uint32
	packets, bytes     uint64
}

func (c *oxsCounters) unmarshal(b []byte) (int, error) {
	if len(b) < oxsStatsHeaderLen {
		return 0, fmt.Errorf("header: %w", io.ErrUnexpectedEOF)
	}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if n < oxsStatsHeaderLen || n+pad8(n) > len(b) {
		return 0, fmt.Errorf("length %d of %d bytes: %w", n, len(b), ErrMalformed)
	}
	for p := b[oxsStatsHeaderLen:n]; len(p) > 0; {
		if len(p) < oxsFieldHeaderSize {
			return 0, fmt.Errorf("oxs header: %w", io.ErrUnexpectedEOF)
		}
		h := binary.BigEndian.Uint32(p)
		class, field, l := uint16(h>>16), uint8(h>>9)&0x7f, int(h&0xff)
		if len(p) < oxsFieldHeaderSize+l {
			return 0, fmt.Errorf("oxs 0x%08x: %w", h, io.ErrUnexpectedEOF)
		}
		val := p[oxsFieldHeaderSize : oxsFieldHeaderSize+l]
		if class == oxsClassBasic {
			want := 8
			if field == oxsFlowCount {
				want = 4
			}
			known := field == oxsDuration || field == oxsIdleTime || field == oxsFlowCount || field == oxsPacketCount || field == oxsByteCount
			if known && l != want {
				return 0, fmt.Errorf("oxs field %d: length %d, want %d: %w", field, l, want, ErrMalformed)
			}
			switch field {
			case oxsDuration:
				c.duration = duration(val)
			case oxsIdleTime:
				c.idleTime = duration(val)
			case oxsFlowCount:
				c.flowCount = binary.BigEndian.Uint32(val)
			case oxsPacketCount:
				c.packets = binary.BigEndian.Uint64(val)
			case oxsByteCount:
				c.bytes = binary.BigEndian.Uint64(val)
			}
		}
		p = p[oxsFieldHeaderSize+l:]
	}
	return n + pad8(n), nil
}

// appendOXS appends an ofp_stats with the duration, idle time, packet and
// byte counts, as Open vSwitch sends them.
func (c *oxsCounters) append(b []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, oxsClassBasic<<16|oxsDuration<<9|8)
	b = appendDuration(b, c.duration)
	b = binary.BigEndian.AppendUint32(b, oxsClassBasic<<16|oxsIdleTime<<9|8)
	b = appendDuration(b, c.idleTime)
	b = binary.BigEndian.AppendUint32(b, oxsClassBasic<<16|oxsPacketCount<<9|8)
	b = binary.BigEndian.AppendUint64(b, c.packets)
	b = binary.BigEndian.AppendUint32(b, oxsClassBasic<<16|oxsByteCount<<9|8)
	b = binary.BigEndian.AppendUint64(b, c.bytes)
	n := len(b) - start
	binary.BigEndian.PutUint16(b[start+2:], uint16(n))
	return appendZeros(b, pad8(n))
}

// appendFlowStats appends flow stats entries in v's layout.
func appendFlowStats(b []byte, v Version, stats []FlowStats) ([]byte, error) {
	for i := range stats {
		s := &stats[i]
		start := len(b)
		var err error
		if v >= Version15 {
			b = append(b, 0, 0, 0, 0, s.Table, 0)
			b = binary.BigEndian.AppendUint16(b, s.Priority)
			b = binary.BigEndian.AppendUint16(b, s.IdleTimeout)
			b = binary.BigEndian.AppendUint16(b, s.HardTimeout)
			b = binary.BigEndian.AppendUint16(b, uint16(s.Flags))
			b = binary.BigEndian.AppendUint16(b, s.Importance)
			b = binary.BigEndian.AppendUint64(b, s.Cookie)
			if b, err = s.Match.AppendBinary(b); err != nil {
				return b, fmt.Errorf("flow %d: match: %w", i, err)
			}
			c := oxsCounters{duration: s.Duration, idleTime: s.IdleTime, packets: s.PacketCount, bytes: s.ByteCount}
			b = c.append(b)
		} else {
			if s.Importance != 0 && v < Version14 {
				return b, fmt.Errorf("flow %d: importance needs OF1.4 or later: %w", i, ErrUnsupported)
			}
			b = append(b, 0, 0, s.Table, 0)
			b = appendDuration(b, s.Duration)
			b = binary.BigEndian.AppendUint16(b, s.Priority)
			b = binary.BigEndian.AppendUint16(b, s.IdleTimeout)
			b = binary.BigEndian.AppendUint16(b, s.HardTimeout)
			b = binary.BigEndian.AppendUint16(b, uint16(s.Flags))
			b = binary.BigEndian.AppendUint16(b, s.Importance)
			b = append(b, 0, 0)
			b = binary.BigEndian.AppendUint64(b, s.Cookie)
			b = binary.BigEndian.AppendUint64(b, s.PacketCount)
			b = binary.BigEndian.AppendUint64(b, s.ByteCount)
			if b, err = s.Match.AppendBinary(b); err != nil {
				return b, fmt.Errorf("flow %d: match: %w", i, err)
			}
		}
		if b, err = AppendInstructions(b, v, s.Instructions); err != nil {
			return b, fmt.Errorf("flow %d: instructions: %w", i, err)
		}
		if len(b)-start > 0xffff {
			return b, fmt.Errorf("flow %d: %w", i, ErrTooLong)
		}
		binary.BigEndian.PutUint16(b[start:], uint16(len(b)-start))
	}
	return b, nil
}
