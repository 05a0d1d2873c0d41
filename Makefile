# Quick start targets. Each one builds its own virtual environment on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv demo test bench clean

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	# torch is pinned here as well: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[test]" "torch==2.13.0"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fcp demo

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) benchmarks/solver_bench.py

clean:
	rm -rf $(VENV) build *.egg-info

# The upstream MindSpeed-MM test bed's interpreter (tests/upstream/README.md). torch is pinned in both steps.
UPSTREAM_VENV  ?= .venv-upstream
UPSTREAM_STAMP := $(UPSTREAM_VENV)/.installed
.PHONY: upstream-venv

$(UPSTREAM_STAMP): tests/upstream/requirements-cpu.txt
	$(PYTHON) -m venv $(UPSTREAM_VENV)
	$(UPSTREAM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(UPSTREAM_VENV)/bin/python -m pip install --quiet "torch==2.13.0"
	$(UPSTREAM_VENV)/bin/python -m pip install --quiet -r tests/upstream/requirements-cpu.txt "torch==2.13.0"
	touch $(UPSTREAM_STAMP)

upstream-venv: $(UPSTREAM_STAMP)
