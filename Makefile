# The README's commands. Every target builds the pinned virtual environment first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-all lint bench clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

.venv: $(VENV)/.installed

demo: .venv
	$(PY) main.py --config=configs/demo.py --workdir=runs/demo
	@echo "Results: runs/demo/eval/test/results.json, hypotheses.txt, bleu_vs_length.png, alignments/"
	@echo "Metrics: runs/demo/metrics.jsonl; TensorBoard: runs/demo/tensorboard"

test: .venv
	$(PY) -m pytest -q -n auto

lint: .venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: .venv
	$(PY) -m experiments.benchmark --out runs/benchmark.json

clean:
	rm -rf $(VENV) runs
