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

# The unit, system and upstream tests. Where an upstream MindSpeed-MM stack is found (tests/upstream/README.md),
# the bed's interpreter is built first, and the FCP feature tests run a second time against the real MindSpeed
# (with the CPU Ascend surface on the path); where none is found the upstream tests report themselves skipped.
test: $(STAMP)
	@if MINDSPEED_DIR=$$($(PY) tests/upstream/bed.py mindspeed-dir); then \
	  if [ -z "$$FCP_UPSTREAM_PYTHON" ]; then $(MAKE) --no-print-directory upstream-venv || exit 1; fi; \
	  echo "== FCP feature tests against the real MindSpeed ($$MINDSPEED_DIR)"; \
	  PYTHONPATH="$$MINDSPEED_DIR:tests/upstream/cpu_ascend" FCP_EXPECT_MINDSPEED=1 PYTHONDONTWRITEBYTECODE=1 \
	    $(PY) -m pytest -q -p no:cacheprovider tests/ut/feature || exit 1; \
	fi
	@echo "== unit, system and upstream tests"
	$(PY) -m pytest -q -rs tests

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
