# The crs-controller image: the package and its runtime dependencies (no dev extras)
# in a virtualenv on a Python 3.11 base, running as an unprivileged user.
#
# hack/build-image.sh builds it with docker, podman or buildah, whichever works, and
# builds an equivalent Debian base where the default one cannot be pulled. By hand,
# tag it with the name the manifests use, which config/manager/kustomization.yaml
# (images:) sets in one place:
#   docker build -t crs-controller:latest .    # what config/default deploys
#   docker build -t "$(.venv/bin/python hack/release.py --print-image)" .
#                                              # what hack/release.sh's out/ deploys
#
# BASE_IMAGE: any Debian-like image with python3 (>= 3.11) and its venv module. Both
# stages use it, so the venv's interpreter link (/usr/local/bin/python3 on the official
# image, /usr/bin/python3 on Debian's) resolves in the final stage too.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crs_controller ./crs_controller
RUN /opt/venv/bin/pip install .
# The runtime install alone must work (tests/integration/test_runtime_install.py checks
# the same): the CLI starts and renders the samples, or the build fails.
COPY config/samples ./config/samples
RUN /opt/venv/bin/crs-controller --help >/dev/null \
 && /opt/venv/bin/crs-controller render -f config/samples
# The controller never installs anything at run time: pip and setuptools stay behind.
RUN /opt/venv/bin/python -m pip uninstall --yes --quiet pip setuptools

FROM ${BASE_IMAGE}
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# 65532 is the conventional "nonroot" uid; the Deployment also sets runAsNonRoot.
USER 65532:65532
# Metrics, health probes, and the BeforeClusterDelete Runtime Extension (HTTPS).
EXPOSE 8080 8081 9443
ENTRYPOINT ["crs-controller"]
CMD ["run"]
