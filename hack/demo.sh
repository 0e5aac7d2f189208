#!/usr/bin/env bash
# The embedded demo: sets up what a fresh machine needs (see hack/setup.sh), then
# runs `crs-controller demo` — a local control plane with workload clusters, the
# samples from config/samples, the controller, and a ConfigMap edit reaching every
# matching cluster. Extra arguments go to `crs-controller demo`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=hack/setup.sh
source hack/setup.sh
exec .venv/bin/crs-controller demo "$@"
