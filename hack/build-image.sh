#!/usr/bin/env bash
# Builds the controller's image from the Dockerfile with docker, podman or buildah,
# whichever works here (docker only with a reachable daemon: `docker info` succeeds).
#
#   hack/build-image.sh [-t IMAGE] [--builder docker|podman|buildah] [--debian-base]
#
# IMAGE defaults to crs-controller:latest, the name config/default deploys; for the
# release manifests (out/) use "$(.venv/bin/python hack/release.py --print-image)".
#
# Base: $BASE_IMAGE, default the Dockerfile's (docker.io/library/python:3.11-slim).
# When the default cannot be found or pulled (no registry reachable), or with
# --debian-base, an equivalent base (Debian bookworm, its python3 3.11 and venv) is
# built from Debian's packages with mmdebstrap, about half a minute, and kept in the
# builder's image store under a name keyed by its recipe, so later builds reuse it.
#
# podman and buildah builds mount this machine's pip configuration and CA bundle
# read-only into the RUN steps (pip behind a proxy or a private index needs them);
# nothing of them lands in the image. $PIP_CONF names another pip.conf to mount.
#
# Progress goes to stderr; the last line on stdout is "BUILDER IMAGE".
set -euo pipefail
# A failure inside $(...) (building the base) must stop the script too.
shopt -s inherit_errexit

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { echo "==> $*" >&2; }
die() { echo "build-image: $*" >&2; exit 2; }

image=crs-controller:latest
builder=${IMAGE_BUILDER:-}
force_debian=false
while (($#)); do
  case $1 in
    -t | --tag) image=${2:?"$1 needs a value"}; shift 2 ;;
    --builder) builder=${2:?"$1 needs a value"}; shift 2 ;;
    --debian-base) force_debian=true; shift ;;
    -h | --help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

default_base=$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile)
base=${BASE_IMAGE:-$default_base}

# Daemonless builders isolate RUN steps with chroot unless told otherwise: it needs no
# OCI runtime, cgroups or rlimit rights, which containers and CI machines often lack.
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}

works() { # builder: can it build here?
  case $1 in
    docker) command -v docker >/dev/null && docker info >/dev/null 2>&1 ;;
    podman) command -v podman >/dev/null && podman info >/dev/null 2>&1 ;;
    buildah) command -v buildah >/dev/null && buildah info >/dev/null 2>&1 ;;
    *) die "unknown builder: $1 (docker, podman or buildah)" ;;
  esac
}

if [[ -n $builder ]]; then
  works "$builder" || die "$builder cannot build here (is it installed, is its daemon up?)"
else
  for candidate in docker podman buildah; do
    if works "$candidate"; then builder=$candidate; break; fi
  done
  [[ -n $builder ]] || die "no working docker (with a daemon), podman or buildah found"
fi
step "builder: $builder"

have_image() {
  case $builder in
    buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
    *) "$builder" image inspect "$1" >/dev/null 2>&1 ;;
  esac
}

pull() { timeout 120 "$builder" pull --quiet "$1" >/dev/null 2>&1; }

# shellcheck source=hack/image/debian-base.sh
source hack/image/debian-base.sh

if $force_debian; then
  base=$(debian_base)
elif have_image "$base"; then
  step "base: $base (present)"
elif pull "$base"; then
  step "base: $base (pulled)"
elif [[ $base == "$default_base" ]]; then
  step "base: $base cannot be pulled; using an equivalent Debian bookworm base"
  base=$(debian_base)
else
  die "base image $base cannot be pulled"
fi

args=(--build-arg "BASE_IMAGE=$base" -t "$image" -f Dockerfile)
if [[ $builder != docker ]]; then
  # Layers are cached (the base and, while sources are unchanged, the pip install).
  args+=(--layers --network host)
  pip_conf=${PIP_CONF:-/etc/pip.conf}
  [[ -f $pip_conf ]] && args+=(-v "$pip_conf:/etc/pip.conf:ro")
  ca=/etc/ssl/certs/ca-certificates.crt
  [[ -f $ca ]] && args+=(-v "$ca:$ca:ro")
fi

step "building $image on $base"
start=$SECONDS
case $builder in
  buildah) buildah bud "${args[@]}" . >&2 ;;
  *) "$builder" build "${args[@]}" . >&2 ;;
esac
size=$("$builder" images --format '{{.Size}}' "$image" | head -n1)
step "built $image in $((SECONDS - start))s: $size"
echo "$builder $image"
