# Sourced by hack/build-image.sh (which defines $builder, have_image, step and die).
#
# debian_base prints the name of a base image equivalent to python:3.11-slim for the
# Dockerfile's purpose, built from Debian's packages where no registry is reachable:
# bookworm's minimal variant with python3 (3.11), python3-venv and ca-certificates,
# security updates included, without documentation, man pages or locales (as Debian's
# slim images). Its interpreter is /usr/bin/python3; the Dockerfile calls python3.
#
# The image is kept in the builder's store, named after this recipe and the ISO week:
# builds reuse it, and it picks up Debian's updates at most a week late.

debian_base_packages=python3,python3-venv,ca-certificates
debian_mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
debian_security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

debian_base() {
  local recipe name
  recipe=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
  name="localhost/crs-controller-base:bookworm-$recipe-$(date -u +%G-w%V)"
  if have_image "$name"; then
    step "base: $name (cached)"
  else
    _build_debian_base "$name"
  fi
  echo "$name"
}

_build_debian_base() ( # name; a subshell, so the EXIT trap removes the scratch dir
  command -v mmdebstrap >/dev/null \
    || die "building the Debian base needs mmdebstrap (apt-get install mmdebstrap)"
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  start=$SECONDS
  step "base: building $1 with mmdebstrap (about half a minute)"
  # The host's resolv.conf and hostname would be copied in: runtimes provide their own.
  if ! mmdebstrap --quiet --variant=minbase --include="$debian_base_packages" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/*.log "$1"/etc/resolv.conf "$1"/etc/hostname' \
    bookworm "$dir/rootfs.tar" \
    "deb $debian_mirror bookworm main" \
    "deb $debian_mirror bookworm-updates main" \
    "deb $debian_security_mirror bookworm-security main" \
    >"$dir/mmdebstrap.log" 2>&1; then
    tail -n 20 "$dir/mmdebstrap.log" >&2
    die "mmdebstrap failed (it needs root or unprivileged user namespaces)"
  fi
  cat >"$dir/Dockerfile" <<'EOF'
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
CMD ["python3"]
EOF
  case $builder in
    buildah) buildah bud --quiet -t "$1" "$dir" >/dev/null ;;
    *) "$builder" build --quiet -t "$1" "$dir" >/dev/null ;;
  esac
  step "base: built in $((SECONDS - start))s"
)
