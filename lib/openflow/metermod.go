package openflow

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// Special meter ids.
const (
	// MeterMax is OFPM_MAX, the largest id of an ordinary meter.
	MeterMax uint32 = 0xffff0000
	// MeterSlowpath is OFPM_SLOWPATH, the meter of packets sent to the slow
	// path.
	MeterSlowpath uint32 = 0xfffffffd
	// MeterController is OFPM_CONTROLLER, the meter of packet-ins.
	MeterController uint32 = 0xfffffffe
)

// MeterCommand is ofp_meter_mod_command.
type MeterCommand uint16

// Meter mod commands.
const (
	MeterAdd    MeterCommand = 0
	MeterModify MeterCommand = 1
	MeterDelete MeterCommand = 2
)

// String returns "ADD", "MOD" or "DEL".
func (c MeterCommand) String() string {
	switch c {
	case MeterAdd:
		return "ADD"
	case MeterModify:
		return "MOD"
	case MeterDelete:
		return "DEL"
	}
	return fmt.Sprintf("command(%d)", uint16(c))
}

// MeterFlags is the OFPMF_* bit set of a meter.
type MeterFlags uint16

// Meter flags. A meter measures in kbit/s (MeterFlagKbps) or packets/s
// (MeterFlagPktps), not both.
const (
	MeterFlagKbps  MeterFlags = 1 << 0
	MeterFlagPktps MeterFlags = 1 << 1
	MeterFlagBurst MeterFlags = 1 << 2
	MeterFlagStats MeterFlags = 1 << 3
)

var meterFlagNames = [...]string{"kbps", "pktps", "burst", "stats"}

// String renders the flags comma-separated, e.g. "pktps,burst".
func (f MeterFlags) String() string {
	var parts []string
	for i, n := range meterFlagNames {
		if f&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	if rest := f &^ (1<<len(meterFlagNames) - 1); rest != 0 {
		parts = append(parts, fmt.Sprintf("flags:0x%x", uint16(rest)))
	}
	return strings.Join(parts, ",")
}

// MeterBandType is ofp_meter_band_type.
type MeterBandType uint16

// Meter band types. Open vSwitch implements only MeterBandDrop.
const (
	MeterBandDrop         MeterBandType = 1
	MeterBandDSCPRemark   MeterBandType = 2
	MeterBandExperimenter MeterBandType = 0xffff
)

// String returns "drop", "dscp_remark" or "experimenter".
func (t MeterBandType) String() string {
	switch t {
	case MeterBandDrop:
		return "drop"
	case MeterBandDSCPRemark:
		return "dscp_remark"
	case MeterBandExperimenter:
		return "experimenter"
	}
	return fmt.Sprintf("band(%d)", uint16(t))
}

// MeterBand is one band of a meter: what happens to traffic above Rate.
//
//	2 bytes: type
//	2 bytes: len = 16
//	4 bytes: rate (kbit/s or packets/s, per the meter's flags)
//	4 bytes: burst_size (kbit or packets; used with MeterFlagBurst)
//	4 bytes: drop: pad; dscp_remark: prec_level(1) pad(3);
//	         experimenter: experimenter id
type MeterBand struct {
	Type         MeterBandType
	Rate         uint32
	BurstSize    uint32
	PrecLevel    uint8  // dscp_remark only
	Experimenter uint32 // experimenter only
}

const meterBandLen = 16

func appendMeterBands(b []byte, bands []MeterBand) []byte {
	for _, bd := range bands {
		b = binary.BigEndian.AppendUint16(b, uint16(bd.Type))
		b = binary.BigEndian.AppendUint16(b, meterBandLen)
		b = binary.BigEndian.AppendUint32(b, bd.Rate)
		b = binary.BigEndian.AppendUint32(b, bd.BurstSize)
		switch bd.Type {
		case MeterBandDSCPRemark:
			b = append(b, bd.PrecLevel, 0, 0, 0)
		case MeterBandExperimenter:
			b = binary.BigEndian.AppendUint32(b, bd.Experimenter)
		default:
			b = append(b, 0, 0, 0, 0)
		}
	}
	return b
}

func unmarshalMeterBands(b []byte) ([]MeterBand, error) {
	var bands []MeterBand
	for i := 0; len(b) > 0; i++ {
		if err := need(b, meterBandLen, fmt.Sprintf("band %d", i)); err != nil {
			return nil, err
		}
		if n := binary.BigEndian.Uint16(b[2:4]); n != meterBandLen {
			return nil, fmt.Errorf("band %d: length %d, want %d: %w", i, n, meterBandLen, ErrMalformed)
		}
		bd := MeterBand{
			Type:      MeterBandType(binary.BigEndian.Uint16(b[0:2])),
			Rate:      binary.BigEndian.Uint32(b[4:8]),
			BurstSize: binary.BigEndian.Uint32(b[8:12]),
		}
		switch bd.Type {
		case MeterBandDSCPRemark:
			bd.PrecLevel = b[12]
		case MeterBandExperimenter:
			bd.Experimenter = binary.BigEndian.Uint32(b[12:16])
		}
		bands = append(bands, bd)
		b = b[meterBandLen:]
	}
	return bands, nil
}

// MeterMod is OFPT_METER_MOD (type 29), the same in OF1.3 and OF1.5.
//
//	2 bytes: command
//	2 bytes: flags
//	4 bytes: meter_id
//	bands
type MeterMod struct {
	Command MeterCommand
	Flags   MeterFlags
	MeterID uint32
	Bands   []MeterBand
}

func (m *MeterMod) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if !versionOK(v) {
		return TypeMeterMod, b, fmt.Errorf("meter mod: %w", errVersion(v))
	}
	b = binary.BigEndian.AppendUint16(b, uint16(m.Command))
	b = binary.BigEndian.AppendUint16(b, uint16(m.Flags))
	b = binary.BigEndian.AppendUint32(b, m.MeterID)
	return TypeMeterMod, appendMeterBands(b, m.Bands), nil
}

func decodeMeterMod(h Header, b []byte) (Message, error) {
	if !versionOK(h.Version) {
		return nil, fmt.Errorf("meter mod: %w", errVersion(h.Version))
	}
	if err := need(b, 8, "meter mod"); err != nil {
		return nil, err
	}
	m := &MeterMod{
		Command: MeterCommand(binary.BigEndian.Uint16(b[0:2])),
		Flags:   MeterFlags(binary.BigEndian.Uint16(b[2:4])),
		MeterID: binary.BigEndian.Uint32(b[4:8]),
	}
	var err error
	if m.Bands, err = unmarshalMeterBands(b[8:]); err != nil {
		return nil, fmt.Errorf("meter mod %d: %w", m.MeterID, err)
	}
	return m, nil
}

// Meter returns the meter a meter mod describes.
func (m *MeterMod) Meter() MeterEntry {
	return MeterEntry{ID: m.MeterID, Flags: m.Flags, Bands: m.Bands}
}

// MeterEntry is one meter table entry: the natural "one meter" value, as a
// meter config reply describes it and MeterMod installs it.
type MeterEntry struct {
	ID    uint32
	Flags MeterFlags
	Bands []MeterBand
}

// String renders the meter in ovs-ofctl add-meter syntax, e.g.
// "meter=1,pktps,burst,band=type=drop,rate=10,burst_size=20". Further bands
// follow as ",type=...". burst_size appears only with the burst flag, as
// ovs-ofctl requires.
func (e MeterEntry) String() string {
	var sb strings.Builder
	sb.WriteString("meter=")
	switch e.ID {
	case MeterSlowpath:
		sb.WriteString("slowpath")
	case MeterController:
		sb.WriteString("controller")
	default:
		fmt.Fprintf(&sb, "%d", e.ID)
	}
	if f := e.Flags.String(); f != "" {
		sb.WriteByte(',')
		sb.WriteString(f)
	}
	for i, bd := range e.Bands {
		if i == 0 {
			sb.WriteString(",band=")
		} else {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "type=%s,rate=%d", bd.Type, bd.Rate)
		if e.Flags&MeterFlagBurst != 0 && bd.BurstSize != 0 {
			fmt.Fprintf(&sb, ",burst_size=%d", bd.BurstSize)
		}
		if bd.Type == MeterBandDSCPRemark {
			fmt.Fprintf(&sb, ",prec_level=%d", bd.PrecLevel)
		}
	}
	return sb.String()
}

// Mod returns a meter mod that applies cmd to e. Deletes carry no bands.
func (e MeterEntry) Mod(cmd MeterCommand) *MeterMod {
	m := &MeterMod{Command: cmd, Flags: e.Flags, MeterID: e.ID, Bands: e.Bands}
	if cmd == MeterDelete {
		m.Flags, m.Bands = 0, nil
	}
	return m
}

// meterConfigLen is the fixed part of ofp_meter_config.
const meterConfigLen = 8

// unmarshalMeterConfigs decodes meter config reply entries.
//
//	2 bytes: length
//	2 bytes: flags
//	4 bytes: meter_id
//	bands
func unmarshalMeterConfigs(b []byte) ([]MeterEntry, error) {
	var out []MeterEntry
	for i := 0; len(b) > 0; i++ {
		if err := need(b, meterConfigLen, fmt.Sprintf("meter %d", i)); err != nil {
			return nil, err
		}
		n := int(binary.BigEndian.Uint16(b[0:2]))
		e := MeterEntry{Flags: MeterFlags(binary.BigEndian.Uint16(b[2:4])), ID: binary.BigEndian.Uint32(b[4:8])}
		if n < meterConfigLen || n > len(b) {
			return nil, fmt.Errorf("meter %d: length %d of %d bytes: %w", e.ID, n, len(b), ErrMalformed)
		}
		var err error
		if e.Bands, err = unmarshalMeterBands(b[meterConfigLen:n]); err != nil {
			return nil, fmt.Errorf("meter %d: %w", e.ID, err)
		}
		out = append(out, e)
		b = b[n:]
	}
	return out, nil
}

func appendMeterConfigs(b []byte, meters []MeterEntry) ([]byte, error) {
	for _, e := range meters {
		n := meterConfigLen + meterBandLen*len(e.Bands)
		if n > 0xffff {
			return b, fmt.Errorf("meter %d: %d bands: %w", e.ID, len(e.Bands), ErrTooLong)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(n))
		b = binary.BigEndian.AppendUint16(b, uint16(e.Flags))
		b = binary.BigEndian.AppendUint32(b, e.ID)
		b = appendMeterBands(b, e.Bands)
	}
	return b, nil
}

// MeterStats is one entry of a meter stats reply.
type MeterStats struct {
	MeterID       uint32
	FlowCount     uint32 // flows that use the meter
	PacketInCount uint64 // packets that entered the meter
	ByteInCount   uint64
	Duration      time.Duration
	Bands         []BandCounter
}

// BandCounter holds one band's counters: packets and bytes above its rate.
type BandCounter struct {
	PacketCount uint64
	ByteCount   uint64
}

const meterStatsLen = 40

// unmarshalMeterStats decodes meter stats reply entries.
//
//	4 bytes: meter_id
//	2 bytes: len
//	6 bytes: pad
//	4 bytes: flow_count
//	8 bytes: packet_in_count
//	8 bytes: byte_in_count
//	4 bytes: duration_sec
//	4 bytes: duration_nsec
//	per band: packet_band_count (8), byte_band_count (8)
func unmarshalMeterStats(b []byte) ([]MeterStats, error) {
	var out []MeterStats
	for i := 0; len(b) > 0; i++ {
		if err := need(b, meterStatsLen, fmt.Sprintf("meter stats %d", i)); err != nil {
			return nil, err
		}
		s := MeterStats{
			MeterID:       binary.BigEndian.Uint32(b[0:4]),
			FlowCount:     binary.BigEndian.Uint32(b[12:16]),
			PacketInCount: binary.BigEndian.Uint64(b[16:24]),
			ByteInCount:   binary.BigEndian.Uint64(b[24:32]),
			Duration:      duration(b[32:40]),
		}
		n := int(binary.BigEndian.Uint16(b[4:6]))
		if n < meterStatsLen || n > len(b) || (n-meterStatsLen)%16 != 0 {
			return nil, fmt.Errorf("meter stats %d: length %d of %d bytes: %w", s.MeterID, n, len(b), ErrMalformed)
		}
		for p := b[meterStatsLen:n]; len(p) > 0; p = p[16:] {
			s.Bands = append(s.Bands, BandCounter{binary.BigEndian.Uint64(p[0:8]), binary.BigEndian.Uint64(p[8:16])})
		}
		out = append(out, s)
		b = b[n:]
	}
	return out, nil
}

func appendMeterStats(b []byte, stats []MeterStats) ([]byte, error) {
	for _, s := range stats {
		n := meterStatsLen + 16*len(s.Bands)
		if n > 0xffff {
			return b, fmt.Errorf("meter stats %d: %d bands: %w", s.MeterID, len(s.Bands), ErrTooLong)
		}
		b = binary.BigEndian.AppendUint32(b, s.MeterID)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
		b = append(b, 0, 0, 0, 0, 0, 0)
		b = binary.BigEndian.AppendUint32(b, s.FlowCount)
		b = binary.BigEndian.AppendUint64(b, s.PacketInCount)
		b = binary.BigEndian.AppendUint64(b, s.ByteInCount)
		b = appendDuration(b, s.Duration)
		for _, c := range s.Bands {
			b = binary.BigEndian.AppendUint64(b, c.PacketCount)
			b = binary.BigEndian.AppendUint64(b, c.ByteCount)
		}
	}
	return b, nil
}

func init() {
	registerType(TypeMeterMod, decodeMeterMod)
}
