// Package serviceflows builds the OpenFlow state of one service port: pure
// functions from the proxy model to flows, groups and meters, with no I/O.
//
// On br0 (owner "service/<namespace>/<name>:<port>/<PROTOCOL>"):
//
//   - table 30 (ServiceLB): a new connection (+new+trk) to a VIP and port
//     (ClusterIP; node IP and NodePort; ExternalIP; LoadBalancer ingress IP)
//     loads the ServiceID and goes to a select group with
//     selection_method=hash over the 5-tuple's addresses and ports (never
//     dp_hash, which costs a recirculation). TCP and UDP match and hash
//     the connection's original tuple (ct_nw_dst, ct_tp_dst, ...) rather
//     than the packet's: conntrack gives every fragment of a datagram the
//     whole datagram's tuple, so all of them reach one endpoint, where
//     the packet's own ports are only in the first fragment. With ClientIP affinity it
//     first looks the client up in table 31. With externalTrafficPolicy
//     Local (and internalTrafficPolicy Cluster), a local pod's own
//     connection to an external VIP takes the cluster-wide group, at a
//     higher priority, as kube-proxy short-circuits it.
//   - one bucket per endpoint, which commits the DNAT itself:
//     ct(commit,zone=65000,nat(dst=ip:port),table=40), so that an
//     endpoint costs no flow. A host-network endpoint marks SNATToNodeIP in
//     ct_mark (this node's IP is replaced by the host masquerade address,
//     169.254.169.2, which gives the seed's hairpin through breth0 tables 4
//     and 3); the other SNAT needs, a remote pod reached from breth0 (the
//     host or the uplink) and a pod reaching itself, are decided by table
//     40 from the packet (datapath/nodeflows).
//   - table 35 (EndpointDNAT), only with ClientIP affinity: the bucket
//     loads the endpoint into registers and resubmits here, where one flow
//     per endpoint learns the client's binding into table 31 and commits
//     the same DNAT (Open vSwitch does not run learn inside a group
//     bucket).
//   - SCTP: Open vSwitch 3.1's userspace conntrack tracks SCTP as a
//     generic protocol, by addresses only, and NATs only addresses. The
//     DNAT's actions set the endpoint's port (set_field, which makes Open
//     vSwitch recompute the SCTP CRC32c) before an address-only nat, and
//     table 30 translates the ports of the rest of the association
//     statelessly: established original-direction packets to the VIP's
//     port (matched with ct_nw_dst, the VIP) get the endpoint's port, and
//     replies from the endpoint's port (whose source the conntrack lookup
//     has restored to the VIP) get the VIP's port. A client's associations
//     to one VIP address share one conntrack entry, and so one endpoint.
//   - without endpoints: a reject by metered packet-in (userdata: category
//     byte PacketInReject, then the ServiceID, big-endian); an idled service
//     gets nothing here and is left to the unidling hook.
//
// On breth0 (owner "service-gateway/..."): table 0 priority 110 flows that
// bring NodePort, ExternalIP and ingress traffic from the uplink to br0
// and their replies back.
//
// Both IP families come from one code path parameterised by family; each
// family has its own groups (and ids), as do internal and external traffic
// when a Local traffic policy gives them different endpoints.
package serviceflows
