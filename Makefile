# The two set-up commands of the README. Each builds .venv by itself on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: run test test-random notebooks lint clean

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

# `make test-random`: the same pytest run with fresh seeds (tests/conftest.py: LINALG_TEST_RANDOM=1, Hypothesis'
# random profile), to look for rare failures; a failing test prints LINALG_TEST_SEED=<seed> to replay it.
# `make test-random RUNS=20` repeats it, stopping at the first failing run. `make test` keeps fixed seeds.
RUNS ?= 1

test-random: $(VENV)/.installed
	@for i in $$(seq 1 $(RUNS)); do \
		echo "test-random: run $$i of $(RUNS)"; \
		LINALG_TEST_RANDOM=1 $(PY) -m pytest -q || exit 1; \
	done

# `make notebooks`: JupyterLab (the `notebooks` extra) on notebooks/.
notebooks: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[dev,notebooks]'
	$(VENV)/bin/jupyter lab notebooks/

lint: $(VENV)/.installed
	$(PY) -m ruff check linalg_gpu cva tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
