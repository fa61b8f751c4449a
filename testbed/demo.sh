#!/bin/bash
# The nodeflow demo (`make demo`): bring up the default testbed, deploy a
# sample Deployment and Service, run traffic through the service from a pod,
# from a node's host and from the external host, and show both bridges' flows
# on one node. The cluster stays up; `bin/testbed down` removes it.
#
# It exits non-zero when a traffic check fails.
set -u
cd "$(dirname "$0")/.."
TB=bin/testbed
K="$TB kubectl"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if $TB status >/dev/null 2>&1; then
	say "a testbed is already up; using it"
	$TB status
else
	say "testbed up (default topology: node1, node2, ext1 on a shared fabric)"
	$TB up || exit 1
fi
agent=yes
$TB status -v 2>&1 >/dev/null | grep -q '^agent true' || agent=no

say "deploy: Deployment demo/web (3 replicas of the built-in test server) and Service demo/web"
$K create namespace demo --dry-run=client -o yaml | $K apply -f - >/dev/null
for i in $(seq 50); do $K -n demo get serviceaccount default >/dev/null 2>&1 && break; sleep 0.2; done
$K apply -f testbed/demo/web.yaml
$K -n demo rollout status deployment/web --timeout=120s || exit 1
$K -n demo get pods -o wide
$K -n demo get service web

cip=$($K -n demo get service web -o jsonpath='{.spec.clusterIP}')
cip6=$($K -n demo get service web -o jsonpath='{.spec.clusterIPs[1]}')
pods=($($K -n demo get pods -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.podIP}{" "}{.spec.nodeName}{"\n"}{end}' | sort -k3))
pod=${pods[0]} podip=${pods[1]} podnode=${pods[2]}
other=${pods[3]:-} otherip=${pods[4]:-} othernode=${pods[5]:-}
node1ip=$($K get node node1 -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}' | cut -d' ' -f1)

ok=0 failed=0
try() { # try DESCRIPTION -- NAME CMD...
	local what=$1; shift 2
	local out
	if out=$($TB exec "$@" 2>&1); then
		printf '  \033[32mOK\033[0m    %-58s %s\n' "$what" "$(echo "$out" | head -1)"
		ok=$((ok + 1))
	else
		printf '  \033[31mFAIL\033[0m  %-58s %s\n' "$what" "$(echo "$out" | tail -1)"
		failed=$((failed + 1))
	fi
}
curl="curl -sS --max-time 3"

say "traffic"
try "pod $pod to itself ($podip)" -- demo/$pod $curl http://$podip:8080/
if [ -n "$other" ]; then
	try "pod to pod on $othernode ($otherip)" -- demo/$pod $curl http://$otherip:8080/
fi
try "pod to service $cip:80" -- demo/$pod $curl http://$cip:80/
[ -n "$cip6" ] && try "pod to service [$cip6]:80" -- demo/$pod $curl "http://[$cip6]:80/"
try "host of node1 to service $cip:80" -- node1 $curl http://$cip:80/
try "external host ext1 to NodePort $node1ip:30080" -- ext1 $curl http://$node1ip:30080/
try "external host ext1 to node1 ($node1ip), fabric only" -- ext1 ping -c1 -W2 $node1ip

say "flows on node1"
for br in br0 breth0; do
	echo "-- $br:"
	$TB exec node1 -- ovs-ofctl -O OpenFlow15 dump-flows $br 2>&1 | sed 's/^/   /'
	echo "-- $br groups:"
	$TB exec node1 -- ovs-ofctl -O OpenFlow15 dump-groups $br 2>&1 | sed 's/^/   /'
done

say "summary: $ok worked, $failed failed"
if [ "$agent" = no ]; then
	echo "nodeflow agent is not running on the nodes (see \`bin/testbed status -v\`): nothing programs flows, so traffic fails."
fi
cat <<MSG

The cluster is still up:
  bin/testbed status                 members, namespaces, addresses, OVS rundirs
  bin/testbed kubectl get pods -A    the cluster
  bin/testbed exec node1 -- ovs-vsctl show
  bin/testbed exec demo/$pod -- ip addr
  bin/testbed logs node1             kubelet and agent logs
  bin/testbed down                   remove everything
MSG
[ "$failed" = 0 ]
