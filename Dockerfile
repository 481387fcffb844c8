# syntax=docker/dockerfile:1
# Fleetgate: one image for every role (`fleetgate gateway | global-router | sim | demo | bench`).
# Build: docker build -t fleetgate:dev .
# Base image: any Debian-like image with Python 3.11+ and `python -m venv` (a mirror, or one built
# locally, for hosts without Docker Hub): docker build --build-arg BASE_IMAGE=my/python:3.11 .
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/fleetgate
WORKDIR /src
# Metadata first so the dependency layer is cached across source-only changes.
COPY pyproject.toml README.md ./
COPY common ./common
COPY cluster_gateway ./cluster_gateway
COPY global_router ./global_router
COPY modelsim ./modelsim
COPY bench ./bench
COPY fleetgate ./fleetgate
RUN /opt/fleetgate/bin/pip install ".[otlp]" \
 && /opt/fleetgate/bin/fleetgate --help >/dev/null

FROM ${BASE_IMAGE} AS runtime
LABEL org.opencontainers.image.title="fleetgate" \
      org.opencontainers.image.description="GPU-aware two-tier inference gateway for OpenAI-compatible model servers" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 fleetgate \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin fleetgate
COPY --from=build /opt/fleetgate /opt/fleetgate
ENV PATH=/opt/fleetgate/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /tmp
# gateway http, ext_proc, router http, router gRPC capacity
EXPOSE 8080 9002 8000 50051
USER 10001:10001
ENTRYPOINT ["fleetgate"]
CMD ["--help"]
