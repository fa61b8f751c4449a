// Package dnsmsg reads the DNS replies that the egress firewall learns
// addresses from: a full Ethernet frame, as Open vSwitch hands it to the
// controller in a packet-in, in; the question name and the A and AAAA
// records that answer it, out. The package does no I/O.
//
// # Layers
//
// DecodeFrame walks Ethernet, IP and UDP with nodeflow/lib/packet, checks the
// UDP header and returns the datagram with its addresses. It runs on the
// path of a held DNS reply: it allocates nothing, it checks every length
// against both the header's claim and the bytes present (a frame cut
// short, for example by a packet-in's max_len, gives io.ErrUnexpectedEOF),
// and it refuses what cannot be a whole DNS reply (fragments, an IPv4
// total length of 0) with sentinel errors. The tests and the fuzz target
// use gopacket to build frames and as an independent decoder to compare
// against.
//
// ParseHeader reads the 12-byte DNS header without decoding the rest, and
// Classify combines both to say, cheaply, whether a frame is a DNS reply
// worth holding while the agent installs its addresses: a response to a
// standard query, NOERROR, one question and at least one answer record.
// Anything else can be released at once. Classify's Class names are
// stable, for metric labels.
//
// ParseReply decodes the DNS message with github.com/miekg/dns, the same
// library the resolver uses, and FromMsg turns a decoded message into a
// Reply.
//
// # CNAME chains
//
// A reply for www.example.com often carries "www.example.com CNAME
// edge.cdn.net" and "edge.cdn.net A 192.0.2.1". FromMsg follows the chain
// inside the answer section from the question name, case-insensitively,
// for at most MaxChain aliases, and keeps only the A and AAAA records
// owned by the chain's last name: those addresses belong to the question
// name and to every alias on the way (Reply.Names). A record's TTL is
// lowered to the smallest TTL of the CNAMEs that lead to it, since the
// binding of the question name to the address ends when any link does.
// Records owned by names outside the chain, and the authority and
// additional sections, are ignored, so a reply cannot slip in addresses
// for a name that was not asked about. A CNAME loop is an error.
//
// # Scope
//
// Only UDP replies are read: a reply from source port 53. DNS over TCP is
// out of scope for interception, since a reply may span several segments
// and the stream cannot be held and released packet by packet; a client
// that falls back to TCP after a truncated (TC) UDP reply gets its
// addresses without the firewall seeing them first. The resolver's own
// lookups refresh such names, and a truncated UDP reply's records, if it
// carries any, are still learned. UDP and IP checksums are not verified:
// the frame has already crossed the switch and the host delivers or drops
// it by its checksum regardless. Whether a reply is expected (its source
// is a cluster DNS server, it answers a query the pod sent) is for the
// caller to judge with Datagram's addresses and Reply.ID.
//
// # Memory
//
// Datagram.Payload refers to the frame's bytes. A Reply keeps no
// reference into its input: its names are new strings and its addresses
// values.
package dnsmsg
