#!/usr/bin/env bash
# Renders a kustomization as `kustomize build DIR` does, with whichever kustomize is
# here: a kustomize binary on PATH, kubectl's built-in one, or else kustomize built
# from its Go module and cached outside the checkout (as hack/build-binaries.sh
# caches kube-apiserver and etcd), so the install tests run on a machine with none.
# Usage: hack/kustomize.sh DIR   (the YAML on stdout; kustomize's warnings on stderr)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: hack/kustomize.sh DIR" >&2
  exit 2
fi

# The version hack/release.py's renderer matches byte for byte.
version=v5.5.0

if command -v kustomize >/dev/null; then
  exec kustomize build "$1"
fi
if command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1; then
  exec kubectl kustomize "$1"
fi

cache_root=${CRS_CONTROLLER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crs-controller}
out="$cache_root/bin/kustomize-$version"
if [[ ! -x "$out/kustomize" ]]; then
  if ! command -v go >/dev/null; then
    echo "hack/kustomize.sh: no kustomize, kubectl or go here; install one of them" >&2
    exit 2
  fi
  echo "kustomize: building $version from its Go module (a few minutes, once)..." >&2
  mkdir -p "$out"
  CGO_ENABLED=0 GOTOOLCHAIN=local GOBIN="$out" \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kustomize/kustomize/v5@$version" >&2
fi
exec "$out/kustomize" build "$1"
