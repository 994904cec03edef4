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

# Until the CVA engine lands, `make run` runs the small-systems benchmark on the CPU at a small size.
run: $(VENV)/.installed
	$(PY) benchmarks/bench_small.py --batch 20000 --sizes 8 16 32 --repeat 1

test: $(VENV)/.installed
	$(PY) -m ruff check linalg_gpu cva tests benchmarks
	$(PY) -m pytest -q

lint: $(VENV)/.installed
	$(PY) -m ruff check linalg_gpu cva tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
