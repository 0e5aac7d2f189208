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

# tests/integration/test_image.py builds the image and runs it with buildah, on a base
# mmdebstrap builds where none can be pulled. As root on Debian, install what is
# missing (about 10 s); elsewhere that test says why it skips.
image_tools() {
  command -v buildah >/dev/null && command -v mmdebstrap >/dev/null && return
  if [[ $(id -u) != 0 || ! -f /etc/debian_version ]] || ! command -v apt-get >/dev/null; then
    step "buildah or mmdebstrap missing, not installed (not root on Debian): see tests/integration/test_image.py"
    return
  fi
  step "installing buildah and mmdebstrap (for the image test)"
  local log=${TMPDIR:-/tmp}/crs-controller-apt.log
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah mmdebstrap >"$log" 2>&1; then
    # A fresh machine may have no package lists yet.
    apt-get update -q >>"$log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah mmdebstrap >>"$log" 2>&1 \
      || step "could not install buildah and mmdebstrap (see $log): the image test will skip"
  fi
}
image_tools
