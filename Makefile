# Quadrat developer commands. `make demo` and `make test` are the README's quick start.
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install install-test demo test test-fast lint bench screenshots package package-test

install:
	$(PIP) install -e .

install-test:
	$(PIP) install -e '.[test]'

# Install, then open the window on the bundled demo collection (indexed on first use).
demo: install
	quadrat gui --demo

# Install, lint, type-check engine/, app/ and widgets/ (strict), then run the default test suite
# (benchmarks excluded) on up to four cores, a whole test file per worker.
test: install-test
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy
	QT_QPA_PLATFORM=offscreen $(PYTHON) -m pytest -n auto --maxprocesses 4 --dist loadfile

# The fast lane while working: no windows, processes, Ray, servers, packaging or slow tests.
# `make test` (what CI runs) still runs everything.
test-fast: install-test
	QT_QPA_PLATFORM=offscreen $(PYTHON) -m pytest -n auto --maxprocesses 4 --dist loadfile \
		-m "not integration and not slow and not bench"

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

# PNGs of the main views from the real window under Xvfb (see docs/GUIDE.md), one folder per screen
# size, for the demo and the camera-trap demo; fails if the layout clips anything on one.
SCREENS := 1280x800 1600x1000 1920x1080 2560x1440
screenshots:
	for screen in $(SCREENS); do \
		$(PYTHON) tools/screenshots.py --out screenshots/$$screen --screen $${screen}x24 || exit 1; \
		$(PYTHON) tools/screenshots.py --camera-traps --out screenshots/$$screen/camera-traps \
			--screen $${screen}x24 || exit 1; \
	done

# On-demand benchmarks; each prints a Markdown table.
bench:
	$(PYTHON) tests/bench/bench_search.py
	$(PYTHON) tests/bench/bench_indexing.py
	$(PYTHON) tests/bench/bench_gui.py

# The Linux bundle and its archive: the CPU variant, from PyPI's CUDA torch with its CUDA
# libraries stubbed, or from a CPU-only torch if one is installed (see docs/PACKAGING.md).
package:
	$(PIP) install -e '.[package]'
	packaging/build_linux.sh cpu

# Build, then test the bundle with a clean HOME and no network or user environment: its
# self-test, and a model pack imported into it, indexed with and searched.
package-test: package
	packaging/test_bundle.sh dist/Quadrat
