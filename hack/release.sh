#!/usr/bin/env bash
# Writes the release artifacts to out/, in Cluster API's clusterctl provider layout:
#   out/metadata.yaml          release series -> contract (a copy of ./metadata.yaml)
#   out/addon-components.yaml  config/default with clusterctl variables for the image
#                              and the namespace (clusterctl init --addon ...)
#   out/install.yaml           the same with the defaults filled in (kubectl apply -f)
#   out/extension-components.yaml  config/extension (the Runtime Extension's Service
#                              and ExtensionConfig), the same namespace variable
#   out/extension-install.yaml the same with the default filled in
# Usage: hack/release.sh [VERSION]   VERSION defaults to pyproject.toml's, as v0.1.0.
# The image is named in config/manager/kustomization.yaml (images:); the release tags
# it with VERSION. hack/release.py does the work, see its docstring.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ ! -x .venv/bin/python ]]; then
  echo "hack/release.sh: no .venv; create it with hack/test.sh (or: python3 -m venv .venv" \
    "&& .venv/bin/pip install -e .)" >&2
  exit 2
fi

args=(--out out)
if [[ $# -gt 0 ]]; then
  args+=(--version "$1")
fi

# release.py renders config/default and config/extension itself (no kustomize
# needed); where kubectl has kustomize built in, check that the renderings agree.
if command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1; then
  expected=$(mktemp)
  extension=$(mktemp)
  trap 'rm -f "$expected" "$extension"' EXIT
  kubectl kustomize config/default >"$expected"
  kubectl kustomize config/extension >"$extension"
  args+=(--compare-with "$expected" --compare-extension-with "$extension")
fi

.venv/bin/python hack/release.py "${args[@]}"
