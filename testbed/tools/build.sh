#!/bin/sh
# Builds the testbed's control-plane binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) from the Go module proxy
# into a cache directory outside the repository, and skips the build when the
# binaries there were built from the same pinned go.mod/go.sum files and Go.
#
#   testbed/tools/build.sh          build if needed, print the bin directory
#   testbed/tools/build.sh kube-proxy   build kube-proxy alone if needed, print its path
#   testbed/tools/build.sh agnhost      build the upstream agnhost test server alone, likewise
#   testbed/tools/build.sh coredns      build CoreDNS (the cluster DNS) alone, likewise
#   testbed/tools/build.sh e2e.test     build the upstream e2e.test alone (`make conformance`), likewise
#   testbed/tools/build.sh ginkgo       build the ginkgo runner that runs e2e.test in parallel, likewise
#   testbed/tools/build.sh regression-issue-74839   the upstream test image that sends out-of-window TCP, likewise
#   NODEFLOW_TESTBED_CACHE=DIR      cache root (default: $XDG_CACHE_HOME/nodeflow/testbed
#                                   or ~/.cache/nodeflow/testbed)
#   GO=go                           the go command
set -eu

here=$(cd "$(dirname "$0")" && pwd)
GO=${GO:-go}
# pinned MODULE FILE prints the version FILE requires of MODULE.
pinned() { awk -v m="$1" '$1=="require"{$1=""; $0=$0} $1==m{print $2; exit}' "$2"; }

# single NAME MODULE_DIR PACKAGE PINNED builds one program alone, from its
# own tooling module (whose go.mod pins module PINNED, which names the
# version), with its own stamp, into the cache, and prints its path:
# `build.sh kube-proxy` (only the Services benchmark needs it), `build.sh
# agnhost` (the upstream test server that the kubelet stand-in runs for the
# e2e-test-images agnhost image), `build.sh coredns` (the cluster DNS) and
# `build.sh e2e.test` (the upstream e2e tests, for `make conformance`).
# `make testbed-deps` builds agnhost and coredns.
single() {
	s_name=$1 s_mod="$here/$2" s_pkg=$3
	s_version=$(pinned "$4" "$s_mod/go.mod")
	: "${s_version:?$2/go.mod does not pin $4}"
	s_root=${NODEFLOW_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeflow/testbed}
	s_dir="$s_root/$s_name-$s_version"
	s_stamp=$( (cat "$s_mod/go.mod" "$s_mod/go.sum" "$s_mod"/*.go 2>/dev/null; "$GO" env GOVERSION GOOS GOARCH) | sha256sum | cut -d' ' -f1)
	if [ -f "$s_dir/stamp" ] && [ "$(cat "$s_dir/stamp")" = "$s_stamp" ] && [ -x "$s_dir/bin/$s_name" ]; then
		echo "$s_name: $s_version is current in $s_dir/bin" >&2
		echo "$s_dir/bin/$s_name"
		return 0
	fi
	echo "$s_name: building $s_version into $s_dir/bin (minutes cold)" >&2
	mkdir -p "$s_dir/bin"
	rm -f "$s_dir/stamp"
	s_build="build"
	case $s_name in *.test) s_build="test -c" ;; esac
	(cd "$s_mod" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" \
		"$GO" $s_build -trimpath -ldflags "-s -w" -o "$s_dir/bin/$s_name" "$s_pkg")
	echo "$s_stamp" > "$s_dir/stamp"
	echo "$s_name: done" >&2
	echo "$s_dir/bin/$s_name"
}
case "${1:-}" in
kube-proxy) single kube-proxy kubeproxy k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes; exit 0 ;;
agnhost)
	# The image's own files beside the program, in root/: the TLS pair that
	# porter and netexec serve with, and the upload directory.
	a_bin=$(single agnhost e2e k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes)
	a_root=$(dirname "$(dirname "$a_bin")")/root
	a_src=$(cd "$here/e2e" && GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" "$GO" list -m -f '{{.Dir}}' k8s.io/kubernetes)
	mkdir -p "$a_root/uploads"
	cp "$a_src/test/images/agnhost/porter/localhost.crt" "$a_src/test/images/agnhost/porter/localhost.key" "$a_root/"
	chmod 0644 "$a_root/localhost.crt" "$a_root/localhost.key"
	echo "$a_bin"
	exit 0 ;;
coredns) single coredns coredns . github.com/coredns/coredns; exit 0 ;;
e2e.test) single e2e.test e2e k8s.io/kubernetes/test/e2e k8s.io/kubernetes; exit 0 ;;
regression-issue-74839) single regression-issue-74839 e2e k8s.io/kubernetes/test/images/regression-issue-74839 k8s.io/kubernetes; exit 0 ;;
ginkgo) single ginkgo e2e github.com/onsi/ginkgo/v2/ginkgo github.com/onsi/ginkgo/v2; exit 0 ;;
esac

kube_version=$(pinned k8s.io/kubernetes "$here/kube/go.mod")
etcd_version=$(pinned go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")
: "${kube_version:?kube/go.mod does not pin k8s.io/kubernetes}"
: "${etcd_version:?etcd/go.mod does not pin go.etcd.io/etcd/server/v3}"

root=${NODEFLOW_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeflow/testbed}
dir="$root/kube-$kube_version-etcd-$etcd_version"
bin="$dir/bin"

# The stamp covers everything that decides the binaries' contents.
stamp=$( (cat "$here/kube/go.mod" "$here/kube/go.sum" "$here/etcd/go.mod" "$here/etcd/go.sum" "$here/etcd/main.go"; "$GO" env GOVERSION GOOS GOARCH) | sha256sum | cut -d' ' -f1)
bins="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl"

current=1
[ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp" ] || current=0
for b in $bins; do [ -x "$bin/$b" ] || current=0; done
if [ $current = 1 ]; then
	echo "testbed-deps: kubernetes $kube_version and etcd $etcd_version are current in $bin" >&2
	echo "$bin"
	exit 0
fi

echo "testbed-deps: building kubernetes $kube_version and etcd $etcd_version into $bin (about 5 minutes cold)" >&2
mkdir -p "$bin"
rm -f "$dir/stamp"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export CGO_ENABLED=0
ldflags="-s -w"
(cd "$here/etcd" && "$GO" build -trimpath -ldflags "$ldflags" -o "$bin/etcd" .)
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
	echo "testbed-deps: $c" >&2
	(cd "$here/kube" && "$GO" build -trimpath -ldflags "$ldflags" -o "$bin/$c" "k8s.io/kubernetes/cmd/$c")
done
echo "$stamp" > "$dir/stamp"
echo "testbed-deps: done" >&2
echo "$bin"
