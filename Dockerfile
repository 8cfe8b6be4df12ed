# The Nightshift operator. Build context: the repo root.
#   docker build -t nightshift-operator .
# `make images` builds it into the local cluster's real node with a locally built base
# (BASE=<debootstrap bookworm with python3 + pip>); users with a registry keep the default.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Dependencies first, from the lock alone, so a source change reuses this layer: exact
# versions, wheels only, each file checked against its sha256 (hack/lock-images.sh
# writes the lock from pyproject.toml's dependencies and build requirements).
COPY images/operator/requirements.txt /tmp/requirements.txt
RUN pip install --require-hashes --only-binary=:all: -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# The build backend came from the lock: no isolated build fetching setuptools unpinned.
COPY operator/pyproject.toml /src/operator/pyproject.toml
COPY operator/src /src/operator/src
RUN pip install --no-deps --no-build-isolation /src/operator && rm -rf /src \
    && nightshift --help > /dev/null

USER 65532:65532
ENTRYPOINT ["nightshift", "operator"]
