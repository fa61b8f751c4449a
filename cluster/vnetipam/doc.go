// Package vnetipam is the IPAM controller of nodeflow's virtual networks
// (`nodeflow ipam`): it assigns each NetworkAttachment an address of its
// Subnet, unique on the Subnet's VNI, and writes it, with its MAC, into the
// attachment's status. docs/virtual-networks.md has the full design and
// the safety argument; this is the summary.
//
// # Taking an address
//
// An address is taken by creating its IPLock (package api: named
// LockName(vni, ip) in the attachment's namespace, owned by the
// attachment as its controller). The API server refuses a second object of
// the same name, so the create is an atomic test-and-set; AlreadyExists
// means the address is taken, unless the lock turns out to be held by this
// same attachment (name and UID), which then adopts it. The address is
// written into the status only after the lock is held. The controller
// deletes a lock only when the API server (not the cache) says that its
// holder is gone (no attachment of its name and UID), or that its holder's
// status names another address. So no address is ever in two attachments'
// status on one VNI, even with two controllers at once, and a crash at any
// point leaves at worst a lock without a status, which the next sync
// adopts or frees.
//
// # Not redoing work
//
// The informers lag the controller's own writes. It keeps, per
// attachment, the seed's record of the assignment in flight (the
// resourceVersions of the attachment seen and written and of the Subnet,
// the address), and claims on the addresses it locked or found locked but
// does not see in its cache yet. An address in a status whose lock the
// cache lacks, and that no record vouches for, is checked with a GET of
// the lock; a missing lock is created again.
//
// # Using it
//
//	c, err := ipam.New(ipam.Options{Dynamic: dyn, Kube: kube, Registerer: reg})
//	err = ipam.RunLeader(ctx, kube, ipam.Election{Namespace: ns, Identity: id}, log,
//		func(ctx context.Context) { runErr = c.Run(ctx) })
//
// The controller needs RBAC for subnets (get, list, watch; status update),
// networkattachments (get, list, watch, update; status update), iplocks
// (get, list, watch, create, delete), nodes (get, list, watch) and events
// (create, patch, update): deploy/rbac/ipam.yaml, which the tests check
// against every request the controller makes.
package vnetipam
