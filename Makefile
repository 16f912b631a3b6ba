# Both targets set themselves up (virtual environment, dependencies, cached Kubernetes
# binaries), so each is the only command a newcomer needs; running either twice is harmless.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test unit crd clean

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
	$(VENV)/bin/pytest -q -p no:cacheprovider tests

unit: $(STAMP)
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/unit

crd: $(STAMP)
	$(VENV)/bin/specdeploy crd -o crds/specdeploy.io_speculativedeployments.yaml
	cp crds/specdeploy.io_speculativedeployments.yaml charts/specdeploy/crds/

clean:
	-$(VENV)/bin/specdeploy sandbox down
	rm -rf $(VENV)
