package dnsmsg

import (
	"errors"

	"nodeflow/lib/packet"
)

// Sentinel errors. The errors returned by this package wrap one of these
// (or io.ErrUnexpectedEOF when the input ends early) and name the field
// that was wrong.
var (
	// ErrNotIP means the frame carries neither IPv4 nor IPv6.
	ErrNotIP = packet.ErrNotIP
	// ErrNotUDP means the IP packet carries another protocol.
	ErrNotUDP = errors.New("not a UDP datagram")
	// ErrFragment means the packet is a fragment of a larger one, which
	// cannot be read on its own.
	ErrFragment = packet.ErrFragment
	// ErrNotDNSPort means the datagram does not come from port 53.
	ErrNotDNSPort = errors.New("source port is not 53")
	// ErrInvalid means a header field holds a value that cannot be right.
	ErrInvalid = packet.ErrInvalid
	// ErrNotResponse means the DNS message is a query (QR bit clear).
	ErrNotResponse = errors.New("not a response")
	// ErrNotQuery means the DNS message's opcode is not a standard query.
	ErrNotQuery = errors.New("not a standard query")
	// ErrQuestionCount means the DNS message does not have exactly one
	// question.
	ErrQuestionCount = errors.New("not exactly one question")
	// ErrMalformed means the DNS message could not be decoded.
	ErrMalformed = errors.New("malformed dns message")
	// ErrCNAMELoop means the answer's CNAME chain leads back to a name
	// already on it, or is longer than MaxChain.
	ErrCNAMELoop = errors.New("cname chain loops or is too long")
)
