#!/bin/bash
# `make conformance`: build the upstream e2e.test at the testbed's
# Kubernetes version, bring up a testbed of its own (named conformance, so
# that it does not disturb one that is up), run a subset of Kubernetes' own
# e2e tests against it with `testbed conformance`, and take it down.
#
#   testbed/conformance.sh [SUBSET]    sig-network (default), conformance, services or zones
#   CONFORMANCE_OUT=DIR                the report's directory (default _output/conformance)
#   CONFORMANCE_PROCS=N                test processes (default 3; [Serial] tests run alone at the end)
#
# Some tests want more nodes than the default testbed's two (the
# topology-aware routing tests want three zones of two nodes each): the
# zones subset runs them on a testbed of six nodes in three zones
# (testbed/topology/zones.yaml), and sig-network runs them there after the
# rest, with their report in DIR/zones.
#
# The reports (report.md, report.json, e2e.log) are in the output
# directory; the exit status is non-zero when a test failed.
set -eu
cd "$(dirname "$0")/.."
subset=${1:-sig-network}
out=${CONFORMANCE_OUT:-_output/conformance}
e2e=$(GO=${GO:-go} testbed/tools/build.sh e2e.test)
ginkgo=$(GO=${GO:-go} testbed/tools/build.sh ginkgo)
top=$(mktemp)
trap 'bin/testbed --name conformance down >/dev/null 2>&1 || true; rm -f "$top"' EXIT

# run TOPOLOGY SUBSET OUT [ARGS...]: one testbed, one run.
run() {
	local topology=$1 sub=$2 dir=$3
	shift 3
	sed 's/^name: .*/name: conformance/' "$topology" > "$top"
	bin/testbed up -t "$top"
	local rc=0
	bin/testbed --name conformance conformance --subset "$sub" --e2e-test "$e2e" \
		--ginkgo "$ginkgo" --procs "${CONFORMANCE_PROCS:-3}" --out "$dir" "$@" || rc=$?
	bin/testbed --name conformance down >/dev/null
	return $rc
}

case $subset in
zones)
	run testbed/topology/zones.yaml zones "$out" ;;
sig-network)
	rc=0
	run testbed/topology/default.yaml sig-network "$out" --skip 'Traffic Distribution|HealthCheckNodePort correctly when ExternalTrafficPolicy changes' || rc=$?
	run testbed/topology/zones.yaml zones "$out/zones" || rc=$?
	exit $rc ;;
*)
	run testbed/topology/default.yaml "$subset" "$out" ;;
esac
