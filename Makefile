# Both targets set themselves up (virtual environment, dependencies, cached Kubernetes
# binaries), so each is the only command a newcomer needs; running either twice is harmless.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test unit packaging lock crd clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/specdeploy demo

test: $(STAMP)
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/specdeploy sandbox build
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=25 tests

unit: $(STAMP)
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/unit

packaging: $(STAMP)
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/packaging

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
	$(VENV)/bin/specdeploy crd -o crds/specdeploy.io_speculativedeployments.yaml
	cp crds/specdeploy.io_speculativedeployments.yaml charts/specdeploy/files/

clean:
	-$(VENV)/bin/specdeploy sandbox down
	rm -rf $(VENV)
