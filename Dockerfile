# The Nightshift operator. Build context: the repo root.
#   docker build -t nightshift-operator .
# `make images` builds it into the local cluster's real node with a locally built base
# (BASE=<debootstrap bookworm with python3 + pip>); users with a registry keep the default.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Dependencies first, from pyproject.toml alone, so a source change reuses this layer.
COPY operator/pyproject.toml /src/operator/pyproject.toml
RUN python3 -c 'import tomllib; d = tomllib.load(open("/src/operator/pyproject.toml", "rb")); print("\n".join(d["project"]["dependencies"]))' > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt

COPY operator/src /src/operator/src
RUN pip install --no-deps /src/operator && rm -rf /src && nightshift --help > /dev/null

USER 65532:65532
ENTRYPOINT ["nightshift", "operator"]
