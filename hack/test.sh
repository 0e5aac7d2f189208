#!/usr/bin/env bash
# The one test command: sets up everything a fresh machine needs (virtualenv,
# package, kube-apiserver and etcd binaries), then runs every check and test.
# Extra arguments go to pytest, e.g. `hack/test.sh -k testbed -x`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=hack/setup.sh
source hack/setup.sh

step "ruff check";         .venv/bin/ruff check .
step "ruff format --check"; .venv/bin/ruff format --check .
step "mypy (strict)";      .venv/bin/mypy
step "lint-imports";       .venv/bin/lint-imports
step "function length";    .venv/bin/python hack/check_shape.py

step "pytest"
# pytest exits 5 when it collected nothing, which fails this script as it should.
.venv/bin/pytest "$@"
