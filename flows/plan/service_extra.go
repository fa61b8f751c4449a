package plan

// Additions for the service flows (flows/service). They are kept in this
// file so that the plan's owner can fold them into fields.go and
// priority.go; until then CheckFields does not see AffinityChecked, and
// its bit (reg0[5]) is checked against the declared fields by a test in
// flows/service.

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
