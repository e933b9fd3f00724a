# The two set-up commands of the README: `make demo` (main job, end to end on citeseer) and `make test`.
PYTHON ?= python3
PIP_INSTALL = $(PYTHON) -m pip install -q -c constraints.txt -e '.[dev]'
# Two pytest workers (pytest-xdist), a test file each at a time (module fixtures build once): most tests wait on
# processes (Ray, trainers, servers) for part of their time, so two on 2 cores take about half the wall.
PYTEST = $(PYTHON) -X faulthandler -m pytest -q -n 2 --dist loadfile

.PHONY: install demo test test-slow lint bench

install:
	$(PIP_INSTALL)

demo: install
	$(PYTHON) -m pipelines.run --dataset citeseer --preset citeseer-small --seeds 0,1,2

test: install
	$(PYTEST)

lint: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

test-slow: install
	$(PYTEST) -m slow || [ $$? -eq 5 ]  # 5: no slow test collected, which is nothing to fail

bench: install
	$(PYTHON) bench/sampler.py
	$(PYTHON) bench/trainer.py
