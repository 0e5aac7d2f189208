# The crs-controller image: the package and its dependencies in a virtualenv on
# python:3.11-slim, running as an unprivileged user.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crs_controller ./crs_controller
RUN /opt/venv/bin/pip install .

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
