// Package dnsnames keeps the addresses of the DNS names that egress
// firewall rules name, for the firewall to match on.
//
// # Names
//
// Names are registered with Add and released with Release, reference
// counted: a name that several namespaces or policies use is one entry,
// looked up once. Names are compared lower case, without the trailing
// dot. There are two kinds:
//
//   - An exact name ("www.example.com") is looked up actively, A and AAAA
//     at once, as soon as it is added and then whenever its TTL says.
//   - A wildcard ("*.example.com") matches the names exactly one label
//     below its base ("www.example.com", not "example.com" nor
//     "a.b.example.com"). It cannot be looked up; it collects the
//     addresses of the answers it matches: answers observed on their way
//     to pods (Observe, ObserveReply) and the answers to this cache's own
//     lookups of exact names (and their CNAME aliases).
//
// # Lookups
//
// Lookups use github.com/miekg/dns against the servers of the node's
// resolv.conf (dns.ClientConfigFromFile), or Options.Servers. Names are
// fully qualified: search domains and ndots are not applied. Each query
// goes to the servers in order over UDP with EDNS0 (1232 bytes); a
// truncated answer is asked again over TCP from the same server; each
// attempt has Options.Timeout. NOERROR and NXDOMAIN are answers; SERVFAIL,
// REFUSED, timeouts and network errors move on to the next server, and
// fail the lookup when none is left. CNAME chains are followed inside
// the answer (see package dnsmsg).
//
// Lookups run in their own goroutines, at most Options.Workers at once,
// started by Run; no lock is held across network I/O, so a slow or dead
// DNS server never blocks Add, Release, Observe or Addrs. Names that come
// due while every worker is busy wait in order.
//
// # TTLs, expiry and failures
//
// Every address has its own expiry: the time it was last seen plus its
// record's TTL, at least MinTTL (5 s) and at most MaxAddrTTL (24 h). An
// expired address stays until it is shown to be gone: for an exact name,
// the next successful lookup that does not return it removes it (so a
// refresh never opens a gap while it runs); for a wildcard, which has no
// lookups, it goes when it expires. Address sets therefore follow the
// answers both ways (ovn-kubernetes's only grew) and an address a pod may
// still hold from its own answer stays for as long as that answer's TTL.
//
// An exact name is looked up again after the smallest TTL of the answer
// (an empty answer uses the SOA's negative TTL, else DefaultTTL, 30 s),
// at least MinTTL (5 s) and at most MaxTTL (30 min). A TTL of 0 thus
// means a lookup every 5 s. For comparison, openshift-sdn kept TTLs under
// 30 s, turned 30 s - 30 min into 30 s and longer ones into 30 min; and
// ovn-kubernetes turned a TTL of 0 into 30 minutes. Here TTLs within the
// bounds are honoured as they are, since answers observed from pods keep
// the firewall current between lookups anyway.
//
// A failed lookup keeps the name's addresses (those of a family that was
// answered are updated), counts a failure, and retries after MinBackoff
// (1 s), doubling with each failure in a row up to MaxBackoff (5 min);
// the first success resets it. A name whose first lookup fails stays
// registered and is retried the same way (ovn-kubernetes dropped it for
// good, and retried other names only after 30 minutes). NXDOMAIN is not a
// failure: Status reports ErrNoSuchName, and the name is looked up again
// after its negative TTL, so a name that is created later is found.
//
// Addresses in Options.Exclude (the cluster's own networks) and
// unspecified addresses are never added; IPv4-mapped IPv6 addresses are
// kept as IPv4. A name keeps at most MaxAddrs addresses, evicting the one
// that expires soonest.
//
// # Observed answers
//
// Observe and ObserveReply feed answers that pods receive into the same
// entries, on the path of a DNS reply the agent holds until the
// addresses are installed: they take the lock for a few map updates and
// return the names whose address sets changed (nil, without allocating,
// when nothing changed), for the caller to apply before it releases the
// reply. Matches says whether a name's answers would be learned at all.
//
// # Changes
//
// Changes made by lookups, by alias answers and by expiry are posted:
// Changes() receives (one slot, so a burst of changes costs one wake-up)
// and TakeChanged returns the changed names, so the feature rebuilds
// only the namespaces that use them.
//
// # Time and metrics
//
// Time comes from an injected Clock (k8s.io/utils/clock fits it), so tests
// move it by hand along a timeline. The Cache is a prometheus.Collector:
// lookups, failures, lookup duration, observed answers, dropped
// addresses, and gauges of names, addresses and failing names.
//
// Package dnstest is a DNS server whose answers tests control.
package dnsnames
