# Top-level entry points. Both bootstrap what they need on a fresh machine
# (python3 and a C compiler assumed): a tool venv with tox lives in .venv.
PYTHON ?= python3
VENV   := .venv
TOX    := $(VENV)/bin/tox

.PHONY: test demo lint typecheck bootstrap clean dist bench

$(TOX):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet 'tox>=4.11,<5' 'build>=1.2,<2'

bootstrap: $(TOX)

## make test: every tox env that needs no Docker, GPU or network service, then each env's
## test counts (passed / skipped / failed, and why tests were skipped) from its JUnit report.
## The exit status is tox's.
test: $(TOX)
	@start=$$(date +%s); \
	$(TOX) run -q -e native && \
	$(TOX) run-parallel --parallel-no-spinner -p auto; status=$$?; \
	$(PYTHON) scripts/test_summary.py --since "$$start" || true; \
	exit $$status

## make demo: the local demo (no Kubernetes, no Docker).
demo: $(TOX)
	$(TOX) run -q -e native
	$(TOX) run -e demo

## make dist: every package's wheel and sdist in dist/ (scripts/build_dists.py).
dist: $(TOX)
	$(VENV)/bin/python -m pip install --quiet 'build>=1.2,<2'
	$(VENV)/bin/python scripts/build_dists.py

## make bench: the mock library at its floor, each case beside its same-run baseline
## (packages/nvml-engine/bench/floor.py: per call with allocation records, the plain board
## path beside the library from before the live layer, a fresh client's start, nvml-mock-ctl
## beside python3 -c pass), compared with the figures the engine README records
## (bench/floor_figures.json): exit 1 on a regression of more than 20 %. Its venv has every
## package installed editable, as the README's try-it section does.
BENCH_VENV := .venv-bench
$(BENCH_VENV)/.installed: $(wildcard packages/*/pyproject.toml)
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet $(foreach p,$(dir $(wildcard packages/*/pyproject.toml)),-e $(p)) nvidia-ml-py nvidia-nvml-dev
	touch $@

bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python packages/nvml-engine/bench/floor.py --check packages/nvml-engine/bench/floor_figures.json

lint: $(TOX)
	$(TOX) run -e lint

typecheck: $(TOX)
	$(TOX) run -e typecheck

clean:
	rm -rf $(VENV) $(BENCH_VENV) .tox .demo dist
