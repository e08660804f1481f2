# syntax=docker/dockerfile:1
# The fabricsched image: `fabricsched run` (operator + extender) for the Helm chart.
#   docker build -t fabricsched:0.1.0 .
# Multi-stage: the build stage installs the package and its dependencies into a virtualenv; the
# runtime stage copies only that virtualenv onto the same base, so pip, the sources and the
# build caches stay out of the image. Both stages use one pinned base (same Python at the same
# path, which the virtualenv's interpreter link needs). Bump the tag deliberately; append
# @sha256:<digest> to pin it byte for byte.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/fabricsched
WORKDIR /src
# The metadata first: pyproject.toml names README.md as the long description.
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN /opt/fabricsched/bin/pip install . \
 && /opt/fabricsched/bin/fabricsched --help > /dev/null
# Byte-compile now: the runtime root filesystem is read-only.
RUN /opt/fabricsched/bin/python -m compileall -q /opt/fabricsched/lib

FROM ${PYTHON_IMAGE} AS runtime
# UID/GID 65532: the chart's podSecurityContext runs both containers of the pod as it.
RUN groupadd --system --gid 65532 fabricsched \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin fabricsched
COPY --from=build /opt/fabricsched /opt/fabricsched
ENV PATH=/opt/fabricsched/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
# Health, readiness and metrics (the chart sets --health-address=0.0.0.0:8081); the extender's
# 127.0.0.1:8888 is reachable only inside the pod.
EXPOSE 8081
ENTRYPOINT ["fabricsched"]
CMD ["run"]
