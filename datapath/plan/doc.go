// Package plan is nodeflow's pipeline plan: the tables of both bridges with
// their explicit, stable numbers, the register, ct_mark and ct_label
// fields, the cookie layout (feature, owner, generation), the priorities,
// the group and meter id ranges, and the node's address plan (the router
// and mp0 addresses of each pod subnet, the next hops out of breth0).
//
// Everything is a typed value. A register field cannot end past bit 31, a
// mark cannot hold a value wider than its field, and a test fails when two
// declared fields overlap unless the overlap is declared as an alias. Flow
// builders use these values instead of bare numbers, so a mistake shows up
// in `go test` and not in ovs-vswitchd's log.
//
// docs/pipeline.md documents the plan, one section per table. A test in
// this package checks the document against the constants here, so the two
// cannot drift apart.
package plan
