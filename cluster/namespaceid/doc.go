// Package namespaceid gives every namespace a collision-free 24-bit id, the same
// on every node.
//
// br0 carries the source pod's namespace id in a register (plan.NamespaceID)
// and, between nodes, in the VXLAN key; the egress firewall and
// NetworkPolicy match on it. Two namespaces that share an id share each
// other's rules, so an id must be unique in the cluster, the same on every
// node, stable across agent restarts, and not handed to another namespace
// while any node still has flows of its previous holder.
//
// # The id space
//
// The 24 bits are split in two halves:
//
//	0                     None: host traffic, or no id yet
//	FirstID..LastID       1..0x7fffff: namespace ids (nsid hands these out)
//	FirstVNI..LastVNI     0x800000..0xffffff: reserved for virtual networks' VNIs
//
// # Using it (the node agent)
//
//	ids, err := nsid.New(nsid.Config{NodeName: node, Rest: restConfig,
//		Informers: factory, InUse: installedIDs, Log: log})
//	ids.Table().OnChange(rebuildNamespace) // before the factory starts
//	factory.Start(ctx.Done())
//	go ids.Run(ctx)
//	err = ids.WaitReady(ctx)               // before installing flows with ids
//	id, ok := ids.Table().Lookup("web")    // Table satisfies feature.NamespaceIDs
//	ids.Notify()                           // after the node's flows changed
//
// The agent needs RBAC for: namespaceids.nodeflow.io get, list, watch,
// create, update, delete; namespaces get, list, watch; nodes get, list,
// watch, patch (its own Node's annotation); leases in kube-system get,
// create, update.
//
// # Why a lock object per id
//
// A hash of the name (what the agent used before) is the same on every
// node without coordination, but not collision-free: 24 bits of FNV give
// two namespaces the same id with a probability of about 3% at 1,000
// namespaces and 38% at 4,000.
//
// An annotation on the Namespace ("my id is 42") is not enough either: the
// API server has no transaction across objects, so two allocators (or one
// that crashed between choosing and writing) can give 42 to two namespaces,
// and nothing in the API stops it; every reader would have to detect and
// repair the duplicate. A bitmap object has the same problem the other way:
// a crash between marking the bit and writing the namespace loses or
// double-books the id.
//
// So, as in the IPLock pattern of the k8s OVS SDN example, the id is taken
// by creating a cluster-scoped NamespaceID object (group nodeflow.io,
// version v1alpha1, deploy/crds/namespaceids.yaml) whose name is the id in
// decimal. The API server guarantees unique names, so creating the object
// is an atomic test-and-set of the id; no other state exists, so there is
// nothing to keep consistent:
//
//	apiVersion: nodeflow.io/v1alpha1
//	kind: NamespaceID
//	metadata:
//	  name: "4242"                 # the id
//	  ownerReferences: [{apiVersion: v1, kind: Namespace, name: web, uid: ...}]
//	  finalizers: [nodeflow.io/flows-released]
//	spec: {namespace: web, namespaceUID: ...}
//
// The CRD validates the name (a decimal in 1..0x7fffff, by a CEL rule) and
// the spec, and makes the spec immutable: an id changes hands only by its
// lock being deleted and created again. `kubectl get nsid` lists the locks
// with their namespace.
//
// # Allocation
//
// One allocator is active in the cluster: it runs in every agent, under
// client-go leader election on the Lease kube-system/nodeflow-nsid-allocator,
// and another agent takes over within the lease duration (15 s) when the
// leader dies. The election is for efficiency, not safety: the create
// arbitrates, so two allocators running at once (a partitioned old leader)
// can at worst give one namespace two locks, which the rule below resolves.
//
// For each live Namespace without a live lock for its UID, the allocator
// probes from the namespace's home id (FNV-1a of the name, in the range)
// upwards, wrapping, skipping ids that have a lock in its cache or that it
// created a moment ago (Candidate, Choose), and creates the lock. When the
// create fails with AlreadyExists, it reads the lock: if it already names
// this namespace's UID (its own earlier try, or another allocator's), that
// is the id; otherwise it probes on. A crash at any point is harmless: the
// lock is the whole record, and a new allocator over existing locks creates
// nothing. If a namespace ever holds two live locks, the lowest id wins,
// everywhere (Table.Lookup and the allocator agree), and the allocator
// releases the other the normal way, through quarantine.
//
// A namespace re-created with the same name has a new UID: it gets a new
// lock (and id), while the old lock, whose owner is gone, is deleted by the
// garbage collector. The allocator also deletes, after OrphanGrace and a
// read of the Namespace from the API server, a live lock whose namespace is
// gone, so a lock created without an owner reference cannot leak.
//
// # Release and quarantine
//
// Deleting a namespace lets the garbage collector delete its lock. The
// Finalizer keeps the terminating object, and so the id taken, until no
// node has flows that use the id. Each node says so with one watermark, the
// ReleasedAnnotation on its Node object:
//
//	nodeflow.io/nsid-released: "<resourceVersion R>"
//
// meaning: no flow on this node uses the id of any lock that was
// terminating at a resourceVersion up to R ("0": nothing released yet). The
// allocator removes the finalizer of a terminating lock once every node
// running nodeflow (every Node with the annotation) has a watermark at or
// above the lock's resourceVersion. A Node without the annotation never ran
// the agent and has no flows; a Node deleted from the API no longer counts.
//
// A node raises its watermark (Service.Notify, and every Recheck while a
// terminating lock is above it) from a consistent list of the locks, the
// oldest terminating first: it stops at the first lock whose id InUse
// reports, or that its own Table has not yet seen terminating. The
// watermark is a resourceVersion, not a time, on purpose: resourceVersions
// of one resource are comparable (Kubernetes defines them so), a list gives
// a consistent snapshot up to its resourceVersion, and neither depends on
// node clocks or on the one-second precision of deletionTimestamp. An
// informer's view is not enough to claim "nothing up to R": it may deliver
// two objects' changes out of order.
//
// The annotation is written only when it moves: nothing is written while
// no lock is terminating. The agent must get WaitReady before installing
// flows with ids, so that a node is never counted out while it has flows.
//
// What InUse must report: every id referenced by flows installed on the
// node's bridges, and by flow changes not yet installed, including
// rebuilds that Table.OnChange callbacks asked for and that have not run
// yet. The Table calls the OnChange callbacks of a namespace whose id went
// away before it counts the lock as released on this node, so an agent
// that records the rebuild in its OnChange callback (and reports the old id
// until the rebuild is installed) cannot lose the race.
//
// A node whose agent is down keeps its watermark where it was, so every id
// released since stays quarantined until the agent is back (it then removes
// its stale flows and raises the watermark) or the Node is deleted. That is
// safe and cheap: the namespace range has 8,388,607 ids, and only released
// ids wait. One id stuck in use on one node also holds back, on that node,
// the release of every id released after it (the watermark is one value).
// When a node stops running nodeflow for good, remove its annotation.
//
// # Reading
//
// Every agent runs a Table: informers on the locks and the Namespaces.
// Lookup(namespace) is the lowest id among the live, well-formed locks that
// name the namespace's current UID; it never returns a terminating lock's
// id. Malformed locks (a name that is not an id, a missing spec) are
// logged, listed by Table.Malformed, give no namespace an id, and keep
// their id taken; a terminating one whose name is not an id loses the
// finalizer at once.
package namespaceid
