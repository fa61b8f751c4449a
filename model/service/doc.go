// Package service turns Services and EndpointSlices into the service model
// that nodeflow's service flows are built from, the way kube-proxy does.
//
// Informer callbacks only record changes: ServiceTracker.Record and
// EndpointsTracker.Record keep the first previous and the latest current
// processed form of each object, and a change that cancels out (the
// processed forms are equal) disappears. Update applies the pending changes
// and returns the set of service ports whose model changed; both trackers
// return a ChangeSet with that same meaning.
//
// ServicePort is one port of a Service (ClusterIPs of both families,
// NodePort, ExternalIPs, LoadBalancer ingress IPs, protocol, session
// affinity, traffic policies, the idled annotation). Endpoint is one
// endpoint of one port, with kube-proxy's ready, serving and terminating
// conditions; Categorize applies kube-proxy's fallback rules to pick the
// endpoints that internal and external traffic use.
//
// Bad input (an unparseable IP, an unknown EndpointSlice address type, a
// port out of range, a ClusterIP already held by another Service) is
// reported as a *InputError naming the object and field, and the rest of
// the object, and every other object, is still used.
//
// An endpoint address that parses but cannot be right (a ClusterIP, an
// address in the service CIDRs, 255.255.255.255 or a known subnet's
// broadcast address, multicast) is judged where a port's endpoints are
// used, since it depends on the cluster: EndpointCheck says why an address
// is refused, and EndpointsTracker.Usable leaves it out and reports an
// InputError on each EndpointSlice entry that holds it.
package service
