// Package netstack configures the node's own network stack over netlink for
// nodeflow: it moves the uplink's addresses and routes to the gateway
// bridge, keeps the masquerade addresses, service routes and static
// neighbours of the host-to-services design (EnsureHost), finds next-hop
// MACs in the neighbour table (NextHops), and writes the pod network's CNI
// configuration. It knows nothing of Kubernetes.
package netstack
