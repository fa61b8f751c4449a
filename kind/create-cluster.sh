#!/usr/bin/env bash
# nodeflow on kind, for users with Docker: a cluster without a CNI and
# without kube-proxy, Open vSwitch on every node, nodeflow's image loaded
# and deploy/ applied. Needs docker, kind, kubectl and Go (for the image).
#
#   kind/create-cluster.sh            # cluster "nodeflow"
#   KIND_CLUSTER_NAME=nf2 kind/create-cluster.sh
#   kind delete cluster --name nodeflow      # to remove it
#
# The image and the manifests are the ones the testbed proves (see
# docs/install.md); the kind-specific steps are the cluster, Open vSwitch
# on its nodes and the API server's address.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
name=${KIND_CLUSTER_NAME:-nodeflow}
ctx=kind-$name

for tool in docker kind kubectl go; do
	command -v "$tool" >/dev/null || { echo "create-cluster: $tool is missing" >&2; exit 1; }
done

# The image, as nodeflow:kind for the overlay in this directory.
make -C "$root" image VERSION=kind

kind create cluster --name "$name" --config "$here/kind-config.yaml"

# Open vSwitch on every node: kind's node image is Debian with systemd. The
# agent picks the kernel datapath when the host has the openvswitch module,
# the userspace one otherwise (datapathType: auto).
for node in $(kind get nodes --name "$name"); do
	echo "create-cluster: Open vSwitch on $node"
	docker exec "$node" sh -c 'apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openvswitch-switch >/dev/null &&
		systemctl enable --now openvswitch-switch'
done

kind load image-archive "$root/bin/nodeflow-image.tar" --name "$name"

# Without kube-proxy nothing serves the kubernetes Service's ClusterIP
# before nodeflow does: the agent reaches the API server at the
# control-plane node's address.
api=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$name-control-plane")
kubectl --context "$ctx" apply --server-side -k "$here"
kubectl --context "$ctx" -n nodeflow patch configmap nodeflow-agent-config --type merge \
	-p "{\"data\":{\"apiServerHost\":\"$api\",\"apiServerPort\":\"6443\"}}"
kubectl --context "$ctx" -n nodeflow rollout restart daemonset/nodeflow-agent
kubectl --context "$ctx" -n nodeflow rollout status daemonset/nodeflow-agent --timeout=5m
kubectl --context "$ctx" wait --for=condition=Ready nodes --all --timeout=5m
kubectl --context "$ctx" -n nodeflow rollout status deployment/nodeflow-unidler --timeout=5m
echo "create-cluster: nodeflow runs on kind cluster $name (kubectl --context $ctx)"
