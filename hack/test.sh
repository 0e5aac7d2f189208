#!/usr/bin/env bash
# The one test command: sets up everything a fresh machine needs (virtualenv,
# package, kube-apiserver and etcd binaries), then runs every check and test.
# Extra arguments go to pytest, e.g. `hack/test.sh -k testbed -x`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

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

step "ruff check";         .venv/bin/ruff check .
step "ruff format --check"; .venv/bin/ruff format --check .
step "mypy (strict)";      .venv/bin/mypy
step "lint-imports";       .venv/bin/lint-imports

step "pytest"
# pytest exits 5 when it collected nothing, which fails this script as it should.
.venv/bin/pytest "$@"
