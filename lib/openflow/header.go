package openflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is an OpenFlow wire protocol version.
type Version uint8

// Versions nodeflow speaks: OF1.5 on the wire, OF1.3 understood.
const (
	Version10 Version = 0x01
	Version13 Version = 0x04
	Version14 Version = 0x05
	Version15 Version = 0x06
)

// String returns the version in ovs-ofctl's spelling, e.g. "OF1.5".
func (v Version) String() string {
	switch v {
	case Version10:
		return "OF1.0"
	case 0x02:
		return "OF1.1"
	case 0x03:
		return "OF1.2"
	case Version13:
		return "OF1.3"
	case Version14:
		return "OF1.4"
	case Version15:
		return "OF1.5"
	}
	return fmt.Sprintf("OF(0x%02x)", uint8(v))
}

// MsgType is the ofp_header type (OFPT_*).
type MsgType uint8

// OpenFlow message types (OF1.3 numbering; OF1.4+ adds 30-34).
const (
	TypeHello                 MsgType = 0
	TypeError                 MsgType = 1
	TypeEchoRequest           MsgType = 2
	TypeEchoReply             MsgType = 3
	TypeExperimenter          MsgType = 4
	TypeFeaturesRequest       MsgType = 5
	TypeFeaturesReply         MsgType = 6
	TypeGetConfigRequest      MsgType = 7
	TypeGetConfigReply        MsgType = 8
	TypeSetConfig             MsgType = 9
	TypePacketIn              MsgType = 10
	TypeFlowRemoved           MsgType = 11
	TypePortStatus            MsgType = 12
	TypePacketOut             MsgType = 13
	TypeFlowMod               MsgType = 14
	TypeGroupMod              MsgType = 15
	TypePortMod               MsgType = 16
	TypeTableMod              MsgType = 17
	TypeMultipartRequest      MsgType = 18
	TypeMultipartReply        MsgType = 19
	TypeBarrierRequest        MsgType = 20
	TypeBarrierReply          MsgType = 21
	TypeQueueGetConfigRequest MsgType = 22
	TypeQueueGetConfigReply   MsgType = 23
	TypeRoleRequest           MsgType = 24
	TypeRoleReply             MsgType = 25
	TypeGetAsyncRequest       MsgType = 26
	TypeGetAsyncReply         MsgType = 27
	TypeSetAsync              MsgType = 28
	TypeMeterMod              MsgType = 29
	TypeRoleStatus            MsgType = 30
	TypeTableStatus           MsgType = 31
	TypeRequestForward        MsgType = 32
	TypeBundleControl         MsgType = 33
	TypeBundleAddMessage      MsgType = 34
)

// Experimenter (vendor) ids.
const (
	ExperimenterNicira uint32 = 0x00002320
	ExperimenterONF    uint32 = 0x4f4e4600
)

// HeaderLen is the size of ofp_header.
const HeaderLen = 8

// MaxMessageLen is the largest OpenFlow message (the length field is 16 bits).
const MaxMessageLen = 0xffff

// Header is ofp_header.
//
//	1 byte: version
//	1 byte: type
//	2 bytes: length of the whole message, header included
//	4 bytes: transaction id
type Header struct {
	Version Version
	Type    MsgType
	Length  uint16
	Xid     uint32
}

// Sentinel errors. Decoding errors wrap one of these, or io.ErrUnexpectedEOF.
var (
	// ErrMalformed marks input that is long enough but not valid.
	ErrMalformed = errors.New("malformed")
	// ErrTooLong marks a message that would exceed MaxMessageLen.
	ErrTooLong = errors.New("message exceeds 65535 bytes")
	// ErrUnsupported marks a value this package cannot encode for the chosen version.
	ErrUnsupported = errors.New("unsupported")
)

// UnmarshalBinary decodes the first 8 bytes of b.
func (h *Header) UnmarshalBinary(b []byte) error {
	if len(b) < HeaderLen {
		return fmt.Errorf("openflow header: %w", io.ErrUnexpectedEOF)
	}
	h.Version = Version(b[0])
	h.Type = MsgType(b[1])
	h.Length = binary.BigEndian.Uint16(b[2:4])
	h.Xid = binary.BigEndian.Uint32(b[4:8])
	if h.Length < HeaderLen {
		return fmt.Errorf("openflow header: length %d: %w", h.Length, ErrMalformed)
	}
	return nil
}

// AppendBinary appends the 8 encoded bytes of h to b.
func (h Header) AppendBinary(b []byte) []byte {
	b = append(b, uint8(h.Version), uint8(h.Type))
	b = binary.BigEndian.AppendUint16(b, h.Length)
	return binary.BigEndian.AppendUint32(b, h.Xid)
}
