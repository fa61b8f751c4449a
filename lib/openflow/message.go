package openflow

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Message is an OpenFlow message body. Concrete message types live in this
// package; each registers its decoder in an init function.
type Message interface {
	// appendBody appends the message body (everything after the 8-byte
	// header) encoded for version v, and returns the header type to use.
	appendBody(b []byte, v Version) (MsgType, []byte, error)
}

// decodeFunc decodes a message body. body excludes the 8-byte header; for
// experimenter messages it also excludes the 8-byte experimenter prefix.
// Implementations must copy any bytes they keep.
type decodeFunc func(h Header, body []byte) (Message, error)

var (
	decoders    = map[MsgType]decodeFunc{}
	expDecoders = map[expKey]decodeFunc{}
)

type expKey struct {
	experimenter uint32
	expType      uint32
}

// registerType registers the decoder of a message type for every version.
func registerType(t MsgType, fn decodeFunc) {
	if _, dup := decoders[t]; dup {
		panic(fmt.Sprintf("openflow: duplicate decoder for type %d", t))
	}
	decoders[t] = fn
}

// registerExperimenter registers the decoder of an experimenter message
// (OFPT_EXPERIMENTER with the given experimenter id and 32-bit subtype).
func registerExperimenter(experimenter, expType uint32, fn decodeFunc) {
	k := expKey{experimenter, expType}
	if _, dup := expDecoders[k]; dup {
		panic(fmt.Sprintf("openflow: duplicate decoder for experimenter 0x%x type %d", experimenter, expType))
	}
	expDecoders[k] = fn
}

// RawMessage is a message this package does not decode. For experimenter
// messages Experimenter and ExpType are set and Body starts after them.
type RawMessage struct {
	Header       Header
	Experimenter uint32
	ExpType      uint32
	Body         []byte
}

func (m *RawMessage) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	if m.Header.Type == TypeExperimenter {
		b = binary.BigEndian.AppendUint32(b, m.Experimenter)
		b = binary.BigEndian.AppendUint32(b, m.ExpType)
	}
	return m.Header.Type, append(b, m.Body...), nil
}

// appendExperimenterPrefix appends the 8 bytes that follow the header of an
// experimenter message.
func appendExperimenterPrefix(b []byte, experimenter, expType uint32) []byte {
	b = binary.BigEndian.AppendUint32(b, experimenter)
	return binary.BigEndian.AppendUint32(b, expType)
}

// Marshal encodes m as one message of version v with transaction id xid.
func Marshal(v Version, xid uint32, m Message) ([]byte, error) {
	return AppendMessage(nil, v, xid, m)
}

// AppendMessage appends the encoding of m (header included) to b.
func AppendMessage(b []byte, v Version, xid uint32, m Message) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	t, b, err := m.appendBody(b, v)
	if err != nil {
		return b[:start], fmt.Errorf("encode %T: %w", m, err)
	}
	n := len(b) - start
	if n > MaxMessageLen {
		return b[:start], fmt.Errorf("encode %T: %d bytes: %w", m, n, ErrTooLong)
	}
	Header{Version: v, Type: t, Length: uint16(n), Xid: xid}.AppendBinary(b[start:start])
	return b, nil
}

// MessageLen returns the length of the message at the start of b, read from
// its header, or an error if b holds less than a header.
func MessageLen(b []byte) (int, error) {
	var h Header
	if err := h.UnmarshalBinary(b); err != nil {
		return 0, err
	}
	return int(h.Length), nil
}

// Unmarshal decodes exactly one message from b, which must hold the whole
// message and nothing more.
func Unmarshal(b []byte) (Header, Message, error) {
	var h Header
	if err := h.UnmarshalBinary(b); err != nil {
		return h, nil, err
	}
	if int(h.Length) > len(b) {
		return h, nil, fmt.Errorf("openflow %s type %d: length %d, have %d: %w", h.Version, h.Type, h.Length, len(b), io.ErrUnexpectedEOF)
	}
	if int(h.Length) < len(b) {
		return h, nil, fmt.Errorf("openflow %s type %d: %d trailing bytes: %w", h.Version, h.Type, len(b)-int(h.Length), ErrMalformed)
	}
	body := b[HeaderLen:h.Length]
	if h.Type == TypeExperimenter {
		if len(body) < 8 {
			return h, nil, fmt.Errorf("openflow experimenter header: %w", io.ErrUnexpectedEOF)
		}
		exp := binary.BigEndian.Uint32(body[0:4])
		et := binary.BigEndian.Uint32(body[4:8])
		if fn, ok := expDecoders[expKey{exp, et}]; ok {
			m, err := fn(h, body[8:])
			if err != nil {
				return h, nil, fmt.Errorf("openflow experimenter 0x%x type %d: %w", exp, et, err)
			}
			return h, m, nil
		}
		return h, &RawMessage{Header: h, Experimenter: exp, ExpType: et, Body: clone(body[8:])}, nil
	}
	fn, ok := decoders[h.Type]
	if !ok {
		return h, &RawMessage{Header: h, Body: clone(body)}, nil
	}
	m, err := fn(h, body)
	if err != nil {
		return h, nil, fmt.Errorf("openflow %s type %d: %w", h.Version, h.Type, err)
	}
	return h, m, nil
}

// clone copies b so decoded values never alias the input buffer. It returns
// nil for an empty slice.
func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// pad8 returns the number of zero bytes that align n to 8.
func pad8(n int) int { return (8 - n%8) % 8 }

// appendZeros appends n zero bytes.
func appendZeros(b []byte, n int) []byte {
	for i := 0; i < n; i++ {
		b = append(b, 0)
	}
	return b
}

// need returns a wrapped io.ErrUnexpectedEOF when b is shorter than n.
func need(b []byte, n int, what string) error {
	if len(b) < n {
		return fmt.Errorf("%s: need %d bytes, have %d: %w", what, n, len(b), io.ErrUnexpectedEOF)
	}
	return nil
}
