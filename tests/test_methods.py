"""The method registry: built-ins, parameters, query kinds, plug-ins from an installed package,
and the same methods in `quadrat methods`, `search --method` and `evaluate --method`."""

from __future__ import annotations

import json
import os
import subprocess
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from app.cli import main
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.methods import MethodContext, SearchQuery, method_infos, resolve_spec
from tests.warm_python import WarmPython


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, copy_small_demo_library) -> Path:
    return copy_small_demo_library(tmp_path_factory.mktemp("methods") / "lib")


def test_the_registry_lists_text_with_its_parameters():
    infos = {info.key: info for info in method_infos()}
    text = infos["text"]
    assert text.available and text.reason is None
    assert text.params == {"template": "{query}", "image_weight": 0.5}
    assert text.kinds == ("text", "image", "image+text")


def test_method_specs_parse_typed_parameters_and_refuse_bad_ones():
    spec = resolve_spec("text:template=a photo of {query}, seen from above,image_weight=0.25")
    assert spec.params.template == "a photo of {query}, seen from above"
    assert spec.params.image_weight == 0.25
    assert spec.text == "text:template=a photo of {query}, seen from above,image_weight=0.25"
    for bad, words in (
        ("nosuch", "unknown search method 'nosuch'"),
        ("text:colour=red", "has no parameter colour"),
        ("text:image_weight=lots", "image_weight expects float"),
        ("text:image_weight=2", "between 0 and 1"),
        ("text:template=no placeholder", "must contain {query}"),
        ("text:template", "NAME=VALUE"),
    ):
        with pytest.raises(BadInputError, match=words.replace("{", r"\{").replace("}", r"\}")):
            resolve_spec(bad)


def test_templates_change_the_ranking_and_candidates_restrict_it(
    indexed, demo_encoder, small_demo_collection
):
    with Library.open(indexed) as library:
        context = MethodContext(library, lambda: demo_encoder)
        query = SearchQuery("red circle")
        bare = resolve_spec("text").run(query, context, top_k=60)
        ensemble = resolve_spec("text:template=ensemble").run(query, context, top_k=60)
        assert bare.scores != ensemble.scores  # a different query vector
        top = bare.ids[:5]
        assert sorted(ensemble.ids[:5]) == sorted(top) or ensemble.ids[0] in bare.ids[:10]
        # The rerank protocol: every candidate comes back, and nothing else.
        candidates = bare.ids[20:30]
        reranked = resolve_spec("text").run(query, context, top_k=5, candidates=candidates)
        assert sorted(reranked.ids) == sorted(candidates)
        assert reranked.scores == sorted(reranked.scores, reverse=True)


def test_query_kinds_are_explicit(indexed, demo_encoder, small_demo_collection):
    photo = next(iter(sorted(small_demo_collection.root.rglob("*.jpg"))))
    assert SearchQuery("red").kind == "text"
    assert SearchQuery("", photo).kind == "image"
    assert SearchQuery("on grass", photo).kind == "image+text"
    with Library.open(indexed) as library:
        context = MethodContext(library, lambda: demo_encoder)
        by_photo = resolve_spec("text").run(SearchQuery("", photo), context, top_k=3)
        assert by_photo.scores[0] == pytest.approx(1.0, abs=1e-3)  # the photo finds itself
        mixed = resolve_spec("text:image_weight=0").run(
            SearchQuery("red circle", photo), context, top_k=5
        )
        words = resolve_spec("text").run(SearchQuery("red circle"), context, top_k=5)
        assert mixed.ids == words.ids  # weight 0: the photo plays no part
        np.testing.assert_allclose(mixed.scores, words.scores, atol=1e-5)


def test_a_plugin_method_is_listed_runs_and_reports_why_it_cannot(
    with_plugin, indexed, demo_encoder
):
    infos = {info.key: info for info in method_infos()}
    assert infos["reverse"].source == "quadrat-test-plugin"
    assert infos["reverse"].params == {"depth": 100}
    assert not infos["needsgpu"].available
    assert infos["needsgpu"].reason == "no GPU with 80 GB found"
    assert not infos["broken"].available and "could not be loaded" in infos["broken"].reason
    with pytest.raises(BadInputError, match="no GPU with 80 GB found"):
        resolve_spec("needsgpu")
    with Library.open(indexed) as library:
        context = MethodContext(library, lambda: demo_encoder)
        text = resolve_spec("text").run(SearchQuery("red circle"), context, top_k=100)
        reverse = resolve_spec("reverse").run(SearchQuery("red circle"), context, top_k=100)
    assert reverse.ids == list(reversed(text.ids))


def _cli(warm: WarmPython, plugin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`quadrat ARGS` as a new process that finds the plug-in on its PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plugin), os.getcwd()]))
    return warm.run(["-m", "app.cli", *args], env=env, cwd=os.getcwd(), timeout=300)


def test_a_plugin_method_appears_in_every_command(
    plugin_path, indexed, small_demo_collection, tmp_path, warm_python
):
    cli = partial(_cli, warm_python, plugin_path)
    listed = cli("methods", "--json")
    assert listed.returncode == 0, listed.stderr
    keys = {m["key"]: m for m in json.loads(listed.stdout)}
    assert {"text", "reverse", "needsgpu", "broken"} <= set(keys)
    assert keys["needsgpu"]["available"] is False

    helped = cli("search", "--help")
    assert "reverse" in helped.stdout and "needsgpu" not in helped.stdout  # only what runs

    found = cli("search", "red circle", "--library", str(indexed),
                "--method", "reverse:depth=60", "--top", "3", "--json")  # fmt: skip
    assert found.returncode == 0, found.stderr
    lines = [json.loads(line) for line in found.stdout.splitlines()]
    assert [hit["method"] for hit in lines] == ["reverse:depth=60"] * 3

    refused = cli("search", "red circle", "--library", str(indexed),
                  "--method", "needsgpu")  # fmt: skip
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        == "error: method 'needsgpu' cannot run here: no GPU with 80 GB found"
    )

    # Under the rerank protocol a method reorders the same fixed candidates: the upside-down
    # ranking keeps R and must lose AP against Text (a no-op reranker could not).
    evaluated = cli(
        "evaluate", "--queries", str(small_demo_collection.queries_path),
        "--judgments", str(small_demo_collection.judgments_path), "--library", str(indexed),
        "--k", "5", "--protocol", "rerank", "--method", "text", "--method", "reverse",
        "--permutations", "2000", "--json",
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    result = json.loads(evaluated.stdout)
    text, reverse = result["methods"]["text"], result["methods"]["reverse"]
    assert [q["R"] for q in text["per_query"]] == [q["R"] for q in reverse["per_query"]]
    assert reverse["mAP@5"] < text["mAP@5"] - 0.1
    (comparison,) = result["comparisons"]
    assert comparison["method"] == "reverse" and comparison["baseline"] == "text"
    assert comparison["delta"] == pytest.approx(reverse["mAP@5"] - text["mAP@5"])
    assert comparison["ci95"][0] <= comparison["delta"] <= comparison["ci95"][1]
    assert comparison["p"] < 0.01


def test_evaluate_with_two_methods_prints_them_side_by_side(capsys, indexed, small_demo_collection):
    code = main([
        "evaluate", "--queries", str(small_demo_collection.queries_path),
        "--judgments", str(small_demo_collection.judgments_path), "--library", str(indexed),
        "--k", "10", "--method", "text", "--method", "text:template=a photo of {query}",
        "--permutations", "500",
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "m2 = text:template=a photo of {query}" in out
    assert "mAP@10" in out and "paired randomisation test" in out
    assert any(line.strip().startswith("Appearance") or line.strip().startswith("Species")
               for line in out.splitlines())  # fmt: skip

    code = main(["evaluate", "--queries", str(small_demo_collection.queries_path),
                 "--judgments", str(small_demo_collection.judgments_path),
                 "--library", str(indexed), "--method", "text", "--method", "text"])  # fmt: skip
    assert code == 2 and "given twice" in capsys.readouterr().err


def test_the_model_manager_loads_once_and_frees_the_older_large_model():
    from engine.methods import ModelManager

    loads: list[str] = []

    def loader(name: str):
        return lambda: loads.append(name) or f"model {name}"

    models = ModelManager(max_large=1)
    assert models.get("clip", loader("clip")) == "model clip"
    assert models.get("clip", loader("clip")) == "model clip"  # loaded once
    assert models.get("tokenizer", loader("tokenizer"), large=False) == "model tokenizer"
    assert models.get("stable-diffusion", loader("sd")) == "model sd"
    assert sorted(models.loaded()) == ["stable-diffusion", "tokenizer"]  # CLIP made room
    assert models.get("clip", loader("clip")) == "model clip"
    assert loads == ["clip", "tokenizer", "sd", "clip"]
    models.release("clip")
    assert models.loaded() == ["tokenizer"]


def test_a_long_option_value_is_cut_in_the_label_but_kept_in_the_parameters():
    from engine.methods import get_method, params_to_dict, spec_label
    from engine.methods.text import TextParams

    template = "a field photograph, taken " + "very " * 40 + "carefully, of {query}"
    params = TextParams(template=template)
    label = spec_label(get_method("text"), params)
    assert label.startswith("Text (template=a field photograph") and label.endswith("…)")
    assert len(label) < 50
    assert params_to_dict(params)["template"] == template
