package plan

// Fields, marks and priorities that only the service flows (datapath/serviceflows)
// use. AffinityChecked and AffinityLookedUp are declared in fields.go, so
// CheckFields and docs/pipeline.md cover them.

// AffinityChecked, reg0[5], says table 30 has already looked the
// connection up in the session-affinity table (31): a service with
// affinity resubmits to table 31, sets this bit and resubmits to table 30
// again, where EndpointChosen decides between the learned endpoint and the
// select group.
var AffinityChecked = mustField("AffinityChecked", Pod, SpaceReg, 0, 5, 5, "table 30 has looked up session affinity (table 31)")

// AffinityLookedUp is AffinityChecked set.
var AffinityLookedUp = mustMark("AffinityLookedUp", AffinityChecked, 1)

// PriorityServiceNoEndpoints is table 30's flow for a service port that
// has no endpoint for the traffic: the metered reject packet-in, or a drop
// when a Local traffic policy leaves none on this node. Idled services'
// packet-ins (the Unidle owner) use the same priority; a service port has
// one or the other, never both.
const PriorityServiceNoEndpoints Priority = 190

// PriorityServiceSourceDrop is table 30's drop of new connections to a
// LoadBalancer ingress IP from a source outside the Service's
// spec.loadBalancerSourceRanges: below the VIP's flows, which match the
// allowed sources only (PriorityHigh, PriorityServiceNoEndpoints).
const PriorityServiceSourceDrop Priority = 180

// PriorityServiceAddress is table 30's flow for a ClusterIP on a port that
// no Service serves: new connections to the address get the metered
// reject packet-in (TCP RST, ICMP unreachable), as kube-proxy's
// cluster-ips-check does. Below every per-port flow of the address.
const PriorityServiceAddress Priority = 150

// PriorityServiceCIDR is table 30's drop of whatever is still addressed to
// a service CIDR below every service flow: an address no Service holds,
// and packets to a ClusterIP that are not new (invalid, or not translated
// by conntrack). Nothing addressed to a service CIDR ever reaches the
// routing table, so nothing of it leaves the node.
const PriorityServiceCIDR Priority = 110
