// Package sample builds a sample of the agent's real desired state: the
// flows, groups and meters that the agent would want on br0 and breth0 of
// one node of a two-node cluster, built by the real pure builders
// (datapath/gatewayflows, datapath/nodeflows, datapath/serviceflows) from a fixed model, and held
// in reconcile.Stores that check every flow against the pipeline plan, as
// the agent's stores do.
//
// The sample is what the pipeline's checks run on, so that they check the
// flows that are built and not a description of them:
//   - the recirculation budget: every path of plan.Paths is driven with
//     real packets through the sample installed in a sandboxed
//     ovs-vswitchd, and its recirculations are counted in the datapath;
//   - docs/pipeline.md: the flow shapes of each table are generated from
//     the sample (Shapes), so the document cannot describe a flow that is
//     not built.
//
// Each feature adds its flows in one function of its own (see features in
// build.go), called with the same model the agent would give the feature.
// A new feature (the egress firewall, NetworkPolicy, unidling) adds its
// model to Config, its function to the list, and the paths its conntrack
// work adds to plan.Paths with a probe in this package's path test.
package sample
