#!/bin/sh
# Builds the testbed's control-plane binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) from the Go module proxy
# into a cache directory outside the repository, and skips the build when the
# binaries there were built from the same pinned go.mod/go.sum files and Go.
#
#   testbed/tools/build.sh          build if needed, print the bin directory
#   testbed/tools/build.sh kube-proxy   build kube-proxy alone if needed, print its path
#   NODEFLOW_TESTBED_CACHE=DIR      cache root (default: $XDG_CACHE_HOME/nodeflow/testbed
#                                   or ~/.cache/nodeflow/testbed)
#   GO=go                           the go command
set -eu

here=$(cd "$(dirname "$0")" && pwd)
GO=${GO:-go}
# pinned MODULE FILE prints the version FILE requires of MODULE.
pinned() { awk -v m="$1" '$1=="require"{$1=""; $0=$0} $1==m{print $2; exit}' "$2"; }

# `build.sh kube-proxy` builds kube-proxy alone, from its own tooling module
# (kubeproxy/), with its own stamp, and prints the binary's path. Only the
# Services benchmark needs it, so `make testbed-deps` does not build it.
if [ "${1:-}" = kube-proxy ]; then
	kp_version=$(pinned k8s.io/kubernetes "$here/kubeproxy/go.mod")
	: "${kp_version:?kubeproxy/go.mod does not pin k8s.io/kubernetes}"
	kp_root=${NODEFLOW_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeflow/testbed}
	kp_dir="$kp_root/kube-proxy-$kp_version"
	kp_stamp=$( (cat "$here/kubeproxy/go.mod" "$here/kubeproxy/go.sum"; "$GO" env GOVERSION GOOS GOARCH) | sha256sum | cut -d' ' -f1)
	if [ -f "$kp_dir/stamp" ] && [ "$(cat "$kp_dir/stamp")" = "$kp_stamp" ] && [ -x "$kp_dir/bin/kube-proxy" ]; then
		echo "kube-proxy: $kp_version is current in $kp_dir/bin" >&2
		echo "$kp_dir/bin/kube-proxy"
		exit 0
	fi
	echo "kube-proxy: building $kp_version into $kp_dir/bin (minutes cold)" >&2
	mkdir -p "$kp_dir/bin"
	rm -f "$kp_dir/stamp"
	(cd "$here/kubeproxy" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" \
		"$GO" build -trimpath -ldflags "-s -w" -o "$kp_dir/bin/kube-proxy" k8s.io/kubernetes/cmd/kube-proxy)
	echo "$kp_stamp" > "$kp_dir/stamp"
	echo "kube-proxy: done" >&2
	echo "$kp_dir/bin/kube-proxy"
	exit 0
fi

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
