# specdeploy operator image: `specdeploy run` on a slim Python base, as a non-root user.
# Build: docker build -t <registry>/specdeploy:0.1.0 .
# The runtime installs the wheel with --no-deps after the pinned lock file, so the image has
# exactly the locked dependency set; `pip check` fails the build when the lock is incomplete.
# The lock carries a sha256 for every file of each pin (--require-hashes: a changed or substituted
# download fails the build), is installed from wheels only (the slim base has no compiler; every
# pin has cp311 wheels for amd64 and arm64) and includes the tokenizers extra, so the pairing
# check's tokenizer rule runs in the cluster. The OCI labels take VERSION and SOURCE as build
# arguments; release builds (.github/workflows/release.yaml) pass both, and docker/metadata-action
# sets the same labels there from the tag and the repository.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY operator ./operator
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp
COPY requirements/operator.lock /tmp/operator.lock
COPY --from=builder /dist/ /tmp/dist/
RUN pip install --no-cache-dir --no-deps --only-binary=:all: --require-hashes --requirement /tmp/operator.lock \
    && pip install --no-cache-dir --no-deps /tmp/dist/*.whl \
    && pip check \
    && rm -rf /tmp/dist /tmp/operator.lock
# Declared after the install step, so a new version reuses its cached layer.
ARG VERSION=0.1.0
ARG SOURCE=https://github.com/YOUR-ORG/specdeploy
LABEL org.opencontainers.image.title="specdeploy" \
      org.opencontainers.image.description="Kubernetes operator for EAGLE-3 verifier/speculator pairs on vLLM and SGLang" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
USER 65532:65532
EXPOSE 8080 9090 9443
ENTRYPOINT ["specdeploy", "run"]
