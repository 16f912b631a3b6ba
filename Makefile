# Both targets set themselves up (virtual environment, dependencies, cached Kubernetes
# binaries), so each is the only command a newcomer needs; running either twice is harmless.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test fast unit lint packaging lock crd clean

# The operator (with its test tools) and the local sandbox, its own distribution in sandbox/ that
# adds the `sandbox` and `demo` commands to `specdeploy` (docs/architecture.md).
$(STAMP): pyproject.toml sandbox/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]' -e ./sandbox
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/specdeploy demo

# Targets by what they run (docs/testing.md): `make unit` the pure logic, in seconds; `make fast`
# lint and every suite that needs no real engine (conformance, integration, faults, packaging),
# integration in one lane and the rest in the other; `make test` everything, as CI runs it, the
# real engines (e2e, conformance) in one lane and everything else in the other.
PYTEST := $(VENV)/bin/pytest -q -p no:cacheprovider
LANES := -n 2 --dist loadgroup

lint: $(STAMP)
	$(VENV)/bin/ruff check operator sandbox tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: lint
	$(VENV)/bin/specdeploy sandbox build
	$(PYTEST) $(LANES) --durations=25 tests sandbox/tests

fast: lint
	$(VENV)/bin/specdeploy sandbox build
	$(PYTEST) $(LANES) --first-lane=integration --durations=10 --ignore=tests/e2e tests sandbox/tests

unit: $(STAMP)
	$(PYTEST) tests/unit sandbox/tests

packaging: $(STAMP)
	$(PYTEST) tests/packaging

# The operator image's pinned runtime closure, with the tokenizers extra (transformers, jinja2) so
# the pairing check's tokenizer rule runs in the cluster, resolved for the image's interpreter (the
# Dockerfile's python:3.11 on Linux) whatever Python runs uv. Every pin carries the sha256 of each
# file of that release (amd64 and arm64 wheels alike) for `pip install --require-hashes`. Pins
# already in the file are kept unless pyproject.toml needs others; `make lock LOCK_FLAGS=--upgrade`
# moves them all to the newest.
LOCK := requirements/operator.lock
lock: $(STAMP)
	$(VENV)/bin/uv pip compile --quiet --python-version 3.11 --python-platform linux \
		--extra tokenizers --generate-hashes \
		--custom-compile-command 'make lock' $(LOCK_FLAGS) --output-file $(LOCK) pyproject.toml

crd: $(STAMP)
	$(VENV)/bin/specdeploy crd --output-file crds/specdeploy.io_speculativedeployments.yaml
	cp crds/specdeploy.io_speculativedeployments.yaml charts/specdeploy/files/

clean:
	-$(VENV)/bin/specdeploy sandbox down
	rm -rf $(VENV)
