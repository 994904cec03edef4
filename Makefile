# The two set-up commands of the README. Each builds .venv by itself on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: run test lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# `make run`: the quickstart CVA on the default backend (auto: the GPU if CuPy finds one, else the CPU); it
# replaces the report of an earlier `make run` in reports/quickstart.
run: $(VENV)/.installed
	$(VENV)/bin/cva run configs/quickstart.yaml --overwrite

test: $(VENV)/.installed
	$(PY) -m ruff check linalg_gpu cva tests benchmarks
	$(PY) -m pytest -q

lint: $(VENV)/.installed
	$(PY) -m ruff check linalg_gpu cva tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
