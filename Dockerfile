# fnserve, CPU image. Build:  docker build -t fnserve .
# Run:  docker run -p 8000-8002:8000-8002 -v "$PWD/model_repository:/models:ro" fnserve
#       docker run ... fnserve s3://bucket/prefix --model-control-mode poll   (models from S3)
# The container runs the same `fnserve serve` CLI as a developer's shell; arguments after the
# image name replace the default model path (/models) and may add any `fnserve serve` flag.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# -- build: a self-contained virtualenv under /opt/fnserve --------------------------------------
FROM ${PYTHON_IMAGE} AS build
# onnx: ONNX Runtime (CPU) for Triton-layout repositories; add torch for pytorch_libtorch models.
ARG FNSERVE_EXTRAS=onnx
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY runtime ./runtime
RUN python -m venv /opt/fnserve \
    && /opt/fnserve/bin/python -m pip install --no-cache-dir "/src[${FNSERVE_EXTRAS}]"

# -- runtime: the venv, tini as PID 1, a non-root user -----------------------------------------
FROM ${PYTHON_IMAGE}
# tini reaps the worker processes of process-isolated instances and forwards SIGTERM to fnserve,
# which drains (new requests 503, in-flight ones finish within --shutdown-timeout) and exits 0.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 fnserve \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/fnserve \
       --shell /usr/sbin/nologin fnserve \
    && mkdir -p /models /var/lib/fnserve \
    && chown fnserve:fnserve /var/lib/fnserve
COPY --from=build /opt/fnserve /opt/fnserve
COPY docker/healthcheck.py /opt/fnserve/healthcheck.py
ENV PATH=/opt/fnserve/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    FNSERVE_HTTP_PORT=8000
USER 10001:10001
WORKDIR /var/lib/fnserve
# /models: a mounted model repository (read-only is enough); /var/lib/fnserve: --state-dir,
# where `fnserve deploy` keeps deployments. With s3:// models and no deployments, neither needs
# a volume: the container is stateless.
VOLUME ["/models", "/var/lib/fnserve"]
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "/opt/fnserve/healthcheck.py"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["tini", "--", "fnserve", "serve", "--host", "0.0.0.0", "--state-dir", "/var/lib/fnserve", "--log-format", "json"]
CMD ["/models"]
