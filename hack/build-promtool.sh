#!/usr/bin/env bash
# Builds promtool, which checks and unit-tests config/monitoring's alerts
# (tests/unit/test_monitoring.py), from the Prometheus Go module (hack/promtool) and
# caches it outside the checkout, keyed by version, as hack/build-binaries.sh does for
# kube-apiserver and etcd.
#
# Prints the path of the promtool binary on its last line.
# PROMTOOL, when set to an executable, is used as is.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=$(awk '$1 == "github.com/prometheus/prometheus" {print $2} $2 == "github.com/prometheus/prometheus" {print $3}' "$here/promtool/go.mod" | head -n1)

if [[ -n "${PROMTOOL:-}" && -x "$PROMTOOL" ]]; then
  echo "using PROMTOOL=$PROMTOOL" >&2
  echo "$PROMTOOL"
  exit 0
fi

cache_root=${CRS_CONTROLLER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crs-controller}
out="$cache_root/bin/promtool-$version"
if [[ -x "$out/promtool" ]]; then
  echo "promtool: cached in $out" >&2
else
  if ! command -v go >/dev/null; then
    echo "promtool: go not found, cannot build it" >&2
    exit 2
  fi
  mkdir -p "$out"
  echo "promtool: building $version (several minutes on 2 cores)..." >&2
  start=$SECONDS
  (cd "$here/promtool" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod \
    go build -trimpath -ldflags "-s -w" -o "$out/promtool.tmp" github.com/prometheus/prometheus/cmd/promtool) >&2
  mv "$out/promtool.tmp" "$out/promtool"
  echo "promtool: built in $((SECONDS - start))s" >&2
fi
echo "$out/promtool"
