#!/usr/bin/env bash
# Shared set-up for hack/test.sh and hack/demo.sh: a virtualenv with the package and
# its dev extras, and the real kube-apiserver and etcd binaries (built once, cached).
# Sourced, not run: it exports KUBEBUILDER_ASSETS for the caller.

step() { echo "==> $*" >&2; }

if [[ ! -x .venv/bin/python ]]; then
  step "creating .venv"
  "${PYTHON:-python3}" -m venv .venv
fi
step "installing crs_controller[dev] into .venv"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'

step "building or reusing kube-apiserver and etcd"
KUBEBUILDER_ASSETS=$(bash hack/build-binaries.sh | tail -n 1)
export KUBEBUILDER_ASSETS
