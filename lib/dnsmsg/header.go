package dnsmsg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// HeaderLen is the length of the fixed DNS header.
const HeaderLen = 12

// Response codes and opcodes that this package names.
const (
	OpcodeQuery   = 0
	RcodeSuccess  = 0
	RcodeNXDomain = 3
)

// Header is the fixed DNS header.
type Header struct {
	ID        uint16
	Response  bool  // QR
	Opcode    uint8 // 4 bits
	Truncated bool  // TC
	RCode     uint8 // 4 bits, without an EDNS extension
	QDCount   uint16
	ANCount   uint16
	NSCount   uint16
	ARCount   uint16
}

// ParseHeader reads the DNS header at the start of msg.
func ParseHeader(msg []byte) (Header, error) {
	// 2 bytes ID; 2 bytes flags: QR (1 bit), opcode (4), AA, TC, RD, RA,
	// Z, AD, CD (1 each), RCODE (4); then 2 bytes each: QDCOUNT,
	// ANCOUNT, NSCOUNT, ARCOUNT.
	if len(msg) < HeaderLen {
		return Header{}, fmt.Errorf("dnsmsg: dns header: %d bytes, want %d: %w", len(msg), HeaderLen, io.ErrUnexpectedEOF)
	}
	flags := binary.BigEndian.Uint16(msg[2:4])
	return Header{
		ID:        binary.BigEndian.Uint16(msg[0:2]),
		Response:  flags&0x8000 != 0,
		Opcode:    uint8(flags>>11) & 0x0f,
		Truncated: flags&0x0200 != 0,
		RCode:     uint8(flags & 0x000f),
		QDCount:   binary.BigEndian.Uint16(msg[4:6]),
		ANCount:   binary.BigEndian.Uint16(msg[6:8]),
		NSCount:   binary.BigEndian.Uint16(msg[8:10]),
		ARCount:   binary.BigEndian.Uint16(msg[10:12]),
	}, nil
}

// Class says whether a frame is a DNS reply worth holding, and if not,
// why not. Its String form is stable, for metric labels and logs.
type Class uint8

// The classes, from Classify.
const (
	// Hold: a response to a standard query, NOERROR, one question and at
	// least one answer record. It may carry addresses to learn.
	Hold Class = iota
	// NotDNS: not a UDP datagram from port 53 over IPv4 or IPv6.
	NotDNS
	// Fragment: a fragment of a larger IP packet, unreadable alone.
	Fragment
	// Malformed: a header is cut short or holds an impossible value.
	Malformed
	// NotResponse: the QR bit is clear.
	NotResponse
	// NotQuery: the opcode is not a standard query.
	NotQuery
	// ErrorRCode: the response code is not NOERROR (NXDOMAIN, SERVFAIL,
	// REFUSED...), so there are no addresses to learn.
	ErrorRCode
	// QuestionCount: not exactly one question.
	QuestionCount
	// NoAnswer: the answer section is empty (NODATA, or a truncated
	// reply without records).
	NoAnswer
)

var classNames = [...]string{
	Hold:          "hold",
	NotDNS:        "not-dns",
	Fragment:      "fragment",
	Malformed:     "malformed",
	NotResponse:   "not-response",
	NotQuery:      "not-query",
	ErrorRCode:    "error-rcode",
	QuestionCount: "question-count",
	NoAnswer:      "no-answer",
}

// String returns the class's label, e.g. "hold" or "no-answer".
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Classify reads a frame's headers, not its DNS records, and says whether
// it is worth holding while its addresses are learned. It allocates
// nothing for a well-formed DNS reply. A frame classed Hold may still fail ParseReply if its records
// are malformed; one of any other class can be released at once.
func Classify(frame []byte) Class {
	d, err := DecodeFrame(frame)
	if err != nil {
		switch {
		case errors.Is(err, ErrFragment):
			return Fragment
		case errors.Is(err, ErrNotIP), errors.Is(err, ErrNotUDP), errors.Is(err, ErrNotDNSPort):
			return NotDNS
		default:
			return Malformed
		}
	}
	h, err := ParseHeader(d.Payload)
	if err != nil {
		return Malformed
	}
	return h.Class()
}

// Class judges the header alone; see Classify.
func (h Header) Class() Class {
	switch {
	case !h.Response:
		return NotResponse
	case h.Opcode != OpcodeQuery:
		return NotQuery
	case h.RCode != RcodeSuccess:
		return ErrorRCode
	case h.QDCount != 1:
		return QuestionCount
	case h.ANCount == 0:
		return NoAnswer
	}
	return Hold
}
