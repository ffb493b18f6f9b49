"""A tiny third-party package declaring `quadrat.methods` entry points, built and installed with
pip in a test, so the registry's plug-in path is exercised for real."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PLUGIN_SOURCE = '''
"""A test plug-in: reorders what the Text method finds, worst first."""
from dataclasses import dataclass

from engine.methods import Method, Ranking


@dataclass(frozen=True)
class ReverseParams:
    depth: int = 100


class ReverseMethod(Method):
    key = "reverse"
    label = "Reverse"
    description = "Text's ranking upside down (a test plug-in)"
    Params = ReverseParams

    def run(self, query, params, context, *, top_k, candidates=None):
        base = context.run_method("text", query, top_k=max(top_k, params.depth),
                                  candidates=candidates)
        ids = list(reversed(base.ids))[:top_k]
        return Ranking(ids, [float(-rank) for rank in range(len(ids))])


class NeedsAGpu(Method):
    key = "needsgpu"
    label = "Needs a GPU"
    description = "never available in tests"

    def unavailable_reason(self):
        return "no GPU with 80 GB found"
'''


def build_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny package declaring `quadrat.methods` entry points, built and installed with pip
    into a folder of its own (not into the environment)."""
    root = tmp_path_factory.mktemp("plugin")
    package = root / "src" / "quadrat_test_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(PLUGIN_SOURCE)
    (root / "src" / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "quadrat-test-plugin"
            version = "0.1"

            [project.entry-points."quadrat.methods"]
            reverse = "quadrat_test_plugin:ReverseMethod"
            needsgpu = "quadrat_test_plugin:NeedsAGpu"
            broken = "quadrat_test_plugin_missing:Nothing"
            """
        )
    )
    target = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), str(root / "src")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return target
