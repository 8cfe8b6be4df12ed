# Nightshift: `make demo` and `make test` do all set-up on a fresh Debian 12 machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python
# Go from bookworm-backports when hack/deps.sh had to install it.
export PATH := $(PATH):/usr/lib/go-1.23/bin
export GOTOOLCHAIN ?= auto
PYTEST_ARGS ?=
# mypy's cache outside the checkout, with the upstream parts: a fresh clone re-checks
# only what changed (mypy trusts a cached module whose source hash matches, wherever the
# clone is). Set it to a path in the checkout to start cold.
export MYPY_CACHE_DIR ?= $(HOME)/.cache/nightshift/mypy
# Python's bytecode in one folder of the checkout (gitignored; `make clean` removes it),
# written even where the environment sets PYTHONDONTWRITEBYTECODE (this VM's does): a
# test run starts Python a few hundred times (an operator per worker and per restart,
# the CLI, the pytest workers), and without it each start compiled kopf, the Kubernetes
# client and our package from source again. Measured on the parallel phase, one run
# each way: the tests' processes used 309 CPU-s instead of 382, the phase took 622 s
# instead of 713 (docs/contributing.md).
export PYTHONPYCACHEPREFIX ?= $(CURDIR)/.pycache
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help deps venv upstream lint unit integration test demo cluster-up cluster-down cluster-status images clean kind kind-down validate-examples e2e

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

deps: ## install missing Debian packages and Go
	@bash hack/deps.sh

# The operator (operator/) and the test bed (localcluster/, not part of the product or
# its images) in one install, so the test bed's "nightshift" is this checkout's. uv
# (from PyPI, into the venv) installs them, where pip took 63-70 s on the 2-core VM:
# first offline, from its cache (~/.cache/uv) alone, in about 2 s on a warm machine;
# if the cache lacks anything (a cold machine, a new dependency), resolving against
# the index, about 27 s warm (the same 84 versions as offline, checked 2026-11-30).
$(VENV)/.installed: operator/pyproject.toml localcluster/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q uv
	$(VENV)/bin/uv pip install -q --offline --python $(PY) -e 'operator[dev]' -e localcluster 2>/dev/null \
	  || $(VENV)/bin/uv pip install -q --python $(PY) -e 'operator[dev]' -e localcluster
	touch $@

venv: deps $(VENV)/.installed ## virtualenv with the operator and test bed (editable) and dev tools

upstream: venv ## build etcd, Kubernetes, KWOK, Karpenter, versitygw; fetch kubectl and helm
	$(VENV)/bin/nightshift-localcluster build

lint: venv ## ruff (with security rules), mypy --strict, the layer contracts, shellcheck, hadolint
	$(VENV)/bin/ruff check operator localcluster tests bench examples
	$(VENV)/bin/mypy --config-file operator/pyproject.toml operator/src/nightshift localcluster/src/nightshift_localcluster tests bench examples/simulate_examples.py examples/ci/simulate.py
	$(VENV)/bin/lint-imports --no-logo
	shellcheck $$(git ls-files '*.sh' .ci/run)
	$(VENV)/bin/hadolint Dockerfile images/*/Dockerfile

unit: venv ## unit and golden tests (no cluster), in two workers
	$(VENV)/bin/pytest tests/unit -n 2 $(PYTEST_ARGS)

# pytest exits 5 when it collected no tests; make treats any non-zero exit as failure,
# so an empty suite fails `make test` and CI.
integration: upstream ## integration tests on the local cluster with its real node (or $KUBECONFIG)
	VENV=$(VENV) bash hack/integration.sh $(PYTEST_ARGS)

# upstream before unit: the chart tests need the helm it fetches and the price tests
# Karpenter's module, so on a cold machine they would otherwise skip, not run. The unit
# tests run inside hack/integration.sh, at nice 19 beside the integration tests' parallel
# phase (NIGHTSHIFT_UNIT_BESIDE); a unit failure stops the run before the disruptive tests.
test: lint upstream ## everything CI runs
	NIGHTSHIFT_UNIT_BESIDE=1 VENV=$(VENV) bash hack/integration.sh $(PYTEST_ARGS)

demo: upstream ## local cluster + operator + a pipeline with a progress bar
	$(VENV)/bin/python -m nightshift_localcluster.demo

cluster-up: upstream ## start the local cluster (NIGHTSHIFT_DEFAULT_QPS=1 for upstream client QPS)
	$(VENV)/bin/nightshift-localcluster up $(if $(NIGHTSHIFT_DEFAULT_QPS),--default-qps,)

images: ## build images/*/Dockerfile and ./Dockerfile into the real node's containerd (hack/images.sh)
	bash hack/images.sh

cluster-down: ## stop exactly what cluster-up started
	@if [ -x $(VENV)/bin/nightshift-localcluster ]; then $(VENV)/bin/nightshift-localcluster down; fi

cluster-status: ## each part of the local cluster, its PID and state
	$(VENV)/bin/nightshift-localcluster status

clean: cluster-down ## remove the venv and local cluster state (not the build cache)
	rm -rf $(VENV) .localcluster .mypy_cache .ruff_cache .pytest_cache .pycache

kind: upstream ## kind from parts built here (hack/kind.sh; docs/kind.md says how far it gets)
	bash hack/kind.sh all

kind-down: ## delete the kind cluster and stop hack/kind.sh's dockerd
	bash hack/kind.sh down

validate-examples: venv ## nightshift validate over examples/ (docs/validate.md)
	$(VENV)/bin/nightshift validate examples/virtualcluster-eks.yaml examples/ci/manifests
	$(VENV)/bin/nightshift validate --provider kwok examples/virtualcluster-local.yaml

e2e: venv ## the chart + simulated examples/ci runs on $KUBECONFIG (default: the local cluster); hack/e2e.sh
	VENV=$(VENV) bash hack/e2e.sh
