// Package openflow encodes and decodes OpenFlow 1.3 and 1.5 messages with the
// Nicira (NX) and ONF extensions that Open vSwitch understands, and renders
// matches, actions, flows and groups in ovs-ofctl's text syntax.
//
// The package does no I/O; package lib/openflow/ofconn carries messages over a
// connection. It knows nothing of Kubernetes.
//
// # Encoding
//
// Marshal and AppendMessage encode a Message for a negotiated Version. Layouts
// that differ between versions (group mods, packet-outs, flow stats, bundles,
// the meter instruction) are chosen by that version.
//
// # Decoding
//
// Unmarshal decodes one complete message. Truncated input gives an error that
// wraps io.ErrUnexpectedEOF; malformed values give errors that wrap
// ErrMalformed and name the field. Decoded values never keep references into
// the input buffer: every byte slice they hold is a copy.
//
// Messages of a type this package does not decode come back as *RawMessage.
package openflow
