"""Fixtures the benchmarks share with the tests they measure beside."""

from tests.gui.conftest import make_app  # noqa: F401 - the window's fixture, for bench_responsiveness
