"""Run labels come from the method registry (the saved-query store knows no methods): the
method's label, its non-default options and the query kind, as the window and CLI show them."""

from __future__ import annotations

import pytest

from engine.methods.registry import run_label


@pytest.mark.parametrize(
    ("method", "params", "kind", "label"),
    [
        ("text", {}, "text", "Text"),
        ("text", {"image": "photos/a.jpg"}, "image", "Text · image"),
        ("text", {"filters": {"month": ["2024-05"]}}, "image+text", "Text · image+text"),
        # Drawings are numbered from 1, as the strip shows them ("Use #1").
        (
            "visret",
            {"leave_out": "0", "details": {"prompt": "x"}},
            "text",
            "VisRet (without drawing 1)",
        ),
        ("visret", {"leave_out": "1,2"}, "text", "VisRet (without drawings 2, 3)"),
        # Runs that differ only by their filters are told apart by them.
        ("hybrid", {"filters": {"taxon": "Aves"}}, "text", "Hybrid · taxon=Aves"),
        ("hybrid", {"filters": {"months": [5, 6]}}, "image", "Hybrid · May–Jun, any year · image"),
        ("rocchio", {"alpha": 1.0}, "text", "Rocchio"),  # a default value is not shown
        # A search ranking the detector's boxes, or frames fused with them, says so.
        ("text", {"details": {"unit": "boxes"}}, "text", "Text · boxes"),
        (
            "text",
            {"details": {"unit": "fused"}, "filters": {"taxon": "Aves"}},
            "image",
            "Text · fused · taxon=Aves · image",
        ),  # fmt: skip
        # A plug-in uninstalled since, or a parameter renamed since: the method key.
        ("gone-plugin", {"x": 1}, "text", "gone-plugin"),
        ("gone-plugin", {}, "image", "gone-plugin · image"),
        ("visret", {"images": "many"}, "text", "visret"),
    ],
)
def test_a_run_is_labelled_by_its_method_options_and_query_kind(method, params, kind, label):
    assert run_label(method, params, kind) == label


def test_a_long_saved_option_is_cut_in_the_run_label():
    label = run_label("text", {"template": "a field photograph of " * 5 + "{query}"}, "text")
    assert label.startswith("Text (template=a field photograph") and label.endswith("…)")
