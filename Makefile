# The two set-up commands of the README: `make demo` (main job, end to end on citeseer) and `make test`.
PYTHON ?= python3
PIP_INSTALL = $(PYTHON) -m pip install -q -c constraints.txt -e '.[dev]'

.PHONY: install demo test test-slow lint bench

install:
	$(PIP_INSTALL)

demo: install
	$(PYTHON) -m pipelines.run --dataset citeseer --preset citeseer-small --seeds 0,1,2

test: install
	$(PYTHON) -X faulthandler -m pytest -q

lint: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

test-slow: install
	$(PYTHON) -X faulthandler -m pytest -q -m slow

bench: install
	$(PYTHON) bench/sampler.py
	$(PYTHON) bench/trainer.py
