# The crs-controller image: the package and its runtime dependencies (no dev extras)
# in a virtualenv on python:3.11-slim, running as an unprivileged user.
#
# Tag it with the name the manifests use, which config/manager/kustomization.yaml
# (images:) sets in one place:
#   docker build -t crs-controller:latest .    # what config/default deploys
#   docker build -t "$(.venv/bin/python hack/release.py --print-image)" .
#                                              # what hack/release.sh's out/ deploys
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crs_controller ./crs_controller
RUN /opt/venv/bin/pip install .
# The runtime install alone must work (tests/integration/test_runtime_install.py checks
# the same): the CLI starts and renders the samples, or the build fails.
COPY config/samples ./config/samples
RUN /opt/venv/bin/crs-controller --help >/dev/null \
 && /opt/venv/bin/crs-controller render -f config/samples

FROM python:3.11-slim
# The venv's interpreter links to /usr/local/bin/python3.11, present in both stages.
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# 65532 is the conventional "nonroot" uid; the Deployment also sets runAsNonRoot.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["crs-controller"]
CMD ["run"]
