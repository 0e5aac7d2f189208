#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd used by the integration tests and the demo
# from their Go modules (hack/kube-apiserver, hack/etcd) and caches them outside the
# checkout, keyed by version, so later runs and fresh clones reuse them.
#
# Prints the directory holding both binaries on its last line.
# KUBEBUILDER_ASSETS, when set and holding both binaries, is used as is.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2} $2 == "k8s.io/kubernetes" {print $3}' "$here/kube-apiserver/go.mod" | head -n1)
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2} $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$here/etcd/go.mod" | head -n1)

if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" ]]; then
  echo "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS" >&2
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

cache_root=${CRS_CONTROLLER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crs-controller}
out="$cache_root/bin/kube-apiserver-$k8s_version-etcd-$etcd_version"
mkdir -p "$out"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod

build() { # name module-dir ldflags
  local name=$1 dir=$2 ldflags=$3
  if [[ -x "$out/$name" ]]; then
    echo "$name: cached in $out" >&2
    return
  fi
  echo "$name: building from $dir (several minutes on 2 cores)..." >&2
  local start=$SECONDS
  (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" .) >&2
  mv "$out/$name.tmp" "$out/$name"
  echo "$name: built in $((SECONDS - start))s" >&2
}

minor=$(echo "$k8s_version" | cut -d. -f2)
vpkg=k8s.io/component-base/version
build etcd "$here/etcd" "-s -w"
build kube-apiserver "$here/kube-apiserver" \
  "-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"

echo "$out"
