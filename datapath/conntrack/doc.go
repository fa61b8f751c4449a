// Package conntrack declares every conntrack zone that nodeflow's flows use,
// on both bridges, and the masquerade address plan that joins the host to
// the pod bridge (169.254.169.0/29 and fd69::/125 by default).
//
// Zones are part of the datapath's state: connections committed in a zone
// survive agent restarts, and two features that share a zone by accident
// corrupt each other's NAT. So every zone lives here, once, with the bridge
// that uses it and what it is for; a test rejects duplicates and any br0
// zone inside the range that breth0 reserves (64000-64009, of which the
// seed's flows use 64000, 64001 and 64002).
//
// The package holds plain values only; it does no I/O.
package conntrack
