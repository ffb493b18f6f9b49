# Quadrat developer commands. `make demo` and `make test` are the README's quick start.
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install install-test demo test lint bench screenshots

install:
	$(PIP) install -e .

install-test:
	$(PIP) install -e '.[test]'

# Install, then open the window on the bundled demo collection (indexed on first use).
demo: install
	quadrat gui --demo

# Install, lint, type-check engine/, then run the default test suite (benchmarks excluded).
test: install-test
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy
	QT_QPA_PLATFORM=offscreen $(PYTHON) -m pytest

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

# PNGs of the main views from the real window under Xvfb (see README).
screenshots:
	$(PYTHON) tools/screenshots.py --out screenshots

# On-demand benchmarks; each prints a Markdown table.
bench:
	$(PYTHON) tests/bench/bench_search.py
	$(PYTHON) tests/bench/bench_indexing.py
	$(PYTHON) tests/bench/bench_gui.py
