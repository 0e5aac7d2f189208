#!/usr/bin/env bash
# Shared set-up for hack/test.sh and hack/demo.sh: a virtualenv with the package and
# its dev extras, the real kube-apiserver and etcd binaries and promtool (built once,
# cached).
# Sourced, not run: it exports KUBEBUILDER_ASSETS (and PROMTOOL) for the caller.

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

# promtool checks and unit-tests config/monitoring's alerts; without it those tests
# skip, saying why.
step "building or reusing promtool"
if PROMTOOL=$(bash hack/build-promtool.sh | tail -n 1); then
  export PROMTOOL
else
  step "promtool could not be built: the alert rule tests will skip"
  unset PROMTOOL
fi

# As root on Debian, install Debian packages some tests need when a command is missing
# (buildah and mmdebstrap about 10 s, chromium about 30 s); elsewhere those tests say
# why they skip. debian_packages WHAT TEST COMMAND... -- PACKAGE...
debian_packages() {
  local what=$1 test=$2 commands=() packages=()
  shift 2
  while [[ $1 != -- ]]; do commands+=("$1"); shift; done
  shift
  packages=("$@")
  local missing=0 cmd
  for cmd in "${commands[@]}"; do command -v "$cmd" >/dev/null || missing=1; done
  ((missing)) || return 0
  if [[ $(id -u) != 0 || ! -f /etc/debian_version ]] || ! command -v apt-get >/dev/null; then
    step "$what missing, not installed (not root on Debian): see $test"
    return
  fi
  step "installing ${packages[*]} (for $test)"
  local log=${TMPDIR:-/tmp}/crs-controller-apt.log
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${packages[@]}" >"$log" 2>&1; then
    # A fresh machine may have no package lists yet.
    apt-get update -q >>"$log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${packages[@]}" >>"$log" 2>&1 \
      || step "could not install ${packages[*]} (see $log): $test will skip"
  fi
}
# test_image.py builds the image and runs it with buildah, on a base mmdebstrap builds
# where none can be pulled.
debian_packages "buildah or mmdebstrap" tests/integration/test_image.py \
  buildah mmdebstrap -- buildah mmdebstrap
# The fleet page's tests and benchmark drive a real headless browser through WebDriver.
debian_packages "chromium or chromedriver" tests/integration/controller/test_dashboard.py \
  /usr/bin/chromium /usr/bin/chromedriver -- chromium chromium-driver
