# specdeploy operator image: `specdeploy run` on a slim Python base, as a non-root user.
# Build: docker build -t <registry>/specdeploy:0.1.0 .
# The runtime installs the wheel with --no-deps after the pinned lock file, so the image has
# exactly the locked dependency set; `pip check` fails the build when the lock is incomplete.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp
COPY requirements/operator.lock /tmp/operator.lock
COPY --from=builder /dist/ /tmp/dist/
RUN pip install --no-cache-dir --no-deps --requirement /tmp/operator.lock \
    && pip install --no-cache-dir --no-deps /tmp/dist/*.whl \
    && pip check \
    && rm -rf /tmp/dist /tmp/operator.lock
USER 65532:65532
EXPOSE 8080 9090 9443
ENTRYPOINT ["specdeploy", "run"]
