# syntax=docker/dockerfile:1
# elastic-autoscaler image. Build from the repository root:
#   docker build -t REGISTRY/elastic-autoscaler:TAG \
#     --build-arg VERSION=TAG --build-arg REVISION="$(git rev-parse HEAD)" .
# Pin the base by digest for production builds: --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:...
# Both stages must use the same base: the venv's python is a symlink into it.
ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: a venv with the pinned dependencies and our wheel -------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src

# The runtime venv gets no pip or setuptools of its own: a separate build venv installs
# into it (pip --python), so neither ends up in the image.
COPY deploy/requirements.lock deploy/requirements-build.lock deploy/
RUN python -m venv /opt/build \
    && /opt/build/bin/pip install --no-cache-dir -r deploy/requirements-build.lock \
    && python -m venv --without-pip /opt/venv \
    && /opt/build/bin/pip --python /opt/venv/bin/python install --no-cache-dir --no-deps \
        --only-binary=:all: -r deploy/requirements.lock \
    && /opt/build/bin/pip --python /opt/venv/bin/python check

# Sources last, so a code change does not reinstall the dependencies.
COPY pyproject.toml README.md ./
COPY autoscaler/ autoscaler/
RUN /opt/build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation -w /tmp/dist . \
    && /opt/build/bin/pip --python /opt/venv/bin/python install --no-cache-dir --no-deps \
        /tmp/dist/elastic_autoscaler-*.whl \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

# ---- runtime ---------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="elastic-autoscaler" \
      org.opencontainers.image.description="Resizes elastic Kubeflow PyTorchJobs into idle Volcano queue GPUs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/example/elastic-autoscaler" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

# The pod runs with a read-only root filesystem and an emptyDir at /tmp: nothing may write
# elsewhere (no bytecode caches; any $HOME dotfile goes to /tmp). The image has no
# matplotlib or numpy: they are the simulator's `sim` extra, not the daemon's.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp

# Owned by root and not writable by the runtime user.
COPY --from=build /opt/venv /opt/venv

# Numeric, so Kubernetes can verify runAsNonRoot without an /etc/passwd entry.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["elastic-autoscaler"]
CMD ["run"]
