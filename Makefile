# Top-level entry points. Both bootstrap what they need on a fresh machine
# (python3 and a C compiler assumed): a tool venv with tox lives in .venv.
PYTHON ?= python3
VENV   := .venv
TOX    := $(VENV)/bin/tox

.PHONY: test demo lint typecheck bootstrap clean dist

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

lint: $(TOX)
	$(TOX) run -e lint

typecheck: $(TOX)
	$(TOX) run -e typecheck

clean:
	rm -rf $(VENV) .tox .demo dist
