#!/bin/bash
# `make conformance`: build the upstream e2e.test at the testbed's
# Kubernetes version, bring up a testbed of its own (named conformance, so
# that it does not disturb one that is up), run a subset of Kubernetes' own
# e2e tests against it with `testbed conformance`, and take it down.
#
#   testbed/conformance.sh [SUBSET]    sig-network (default), conformance or services
#   CONFORMANCE_OUT=DIR                the report's directory (default _output/conformance)
#   CONFORMANCE_PROCS=N                test processes (default 3; [Serial] tests run alone at the end)
#
# The report (report.md, report.json, e2e.log) is in the output directory;
# the exit status is non-zero when a test failed.
set -eu
cd "$(dirname "$0")/.."
subset=${1:-sig-network}
out=${CONFORMANCE_OUT:-_output/conformance}
e2e=$(GO=${GO:-go} testbed/tools/build.sh e2e.test)
ginkgo=$(GO=${GO:-go} testbed/tools/build.sh ginkgo)
top=$(mktemp)
trap 'bin/testbed --name conformance down >/dev/null 2>&1 || true; rm -f "$top"' EXIT
sed 's/^name: .*/name: conformance/' testbed/topology/default.yaml > "$top"
bin/testbed up -t "$top"
bin/testbed --name conformance conformance --subset "$subset" --e2e-test "$e2e" \
	--ginkgo "$ginkgo" --procs "${CONFORMANCE_PROCS:-3}" --out "$out"
