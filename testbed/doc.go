// Package testbed brings up a containerlab-style multi-node Kubernetes
// cluster on one machine: network namespaces for nodes, pods and external
// hosts on a shared L2 fabric, one private Open vSwitch per node, a real
// control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler) on loopback, and a kubelet stand-in per node that attaches
// pods with nodeflow's CNI plugin.
//
// One supervisor process (Run) owns everything it starts; every child dies
// with it. Up starts a supervisor in the background and returns when the
// cluster is ready; Down stops it and removes what is left. The state
// directory (State) tells the other commands where everything is.
//
// Layout of the state directory:
//
//	state.json                  the State
//	admin.kubeconfig            cluster-admin credentials for operators and tests
//	pki/                        CA, serving and client certificates, SA keys
//	etcd/                       etcd's data
//	logs/                       etcd.log, kube-apiserver.log, ..., testbed.log
//	nodes/NODE/                 per node: kubelet.log, agent.log, agent.kubeconfig,
//	                            the OVS rundir (nfovs-*), cni/ (IPAM data), net.d/,
//	                            pods/ (one record per pod), podlogs/
package testbed
