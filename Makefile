# The README's commands. Every target builds the pinned virtual environment first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test lint bench browser docs graphviz clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

.venv: $(VENV)/.installed

demo: .venv
	$(PY) main.py --config=configs/demo.py --workdir=runs/demo

test: .venv browser $(VENV)/.optional-installed
	$(PY) -m pytest -q -n auto --dist worksteal

# Optional dependencies (requirements-optional.txt) for their tests, one at a time; where one
# cannot be installed its tests skip and say why, and the others still install.
$(VENV)/.optional-installed: $(VENV)/.installed requirements-optional.txt
	for req in $$(grep -v '^#' requirements-optional.txt); do \
	  $(VENV)/bin/pip install --quiet --disable-pip-version-check "$$req" || \
	  echo "could not install $$req (requirements-optional.txt): its tests will skip"; \
	done
	touch $@

# Headless Chromium and its driver for the explorer's browser test, from apt (as root, or with
# sudo that needs no password) where there is apt; elsewhere that test skips and says why.
browser:
	@command -v chromedriver >/dev/null 2>&1 || { \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "no apt-get: install Chromium and chromedriver to run the explorer's browser test"; \
	  else \
	    if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo="sudo -n"; fi; \
	    { $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	      { $$sudo apt-get update -q >/dev/null 2>&1 && \
	        $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } || \
	    echo "could not install chromium chromium-driver: the explorer's browser test will skip"; \
	  fi; }

# The documentation site (docs/): its pinned Sphinx into the same .venv, then a build in which
# every warning and every unresolved internal reference is an error.
$(VENV)/.docs-installed: $(VENV)/.installed docs/requirements.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r docs/requirements.txt
	touch $@

docs: $(VENV)/.docs-installed graphviz
	$(PY) -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

# Graphviz's dot draws the design page's figure, from apt as the browser target does.
graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "no apt-get: install Graphviz (dot) to build the docs"; \
	  else \
	    if [ "$$(id -u)" = 0 ]; then sudo=""; else sudo="sudo -n"; fi; \
	    { $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q graphviz >/dev/null 2>&1 || \
	      { $$sudo apt-get update -q >/dev/null 2>&1 && \
	        $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q graphviz >/dev/null 2>&1; }; } || \
	    echo "could not install graphviz: the docs build will fail on the design figure"; \
	  fi; }

lint: .venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: .venv
	$(PY) -m experiments.benchmark --out runs/benchmark.json

clean:
	rm -rf $(VENV) runs
