"""The hybrid method: CLIP fused with the words of the records, taxon-aware queries, + and -
terms, filters and fixed candidates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from engine.catalog import Image, Taxon
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.indexing.indexer import Indexer
from engine.methods import MethodContext, SearchQuery, method_infos, resolve_spec
from engine.methods.fusion import shared_ranks
from engine.methods.hybrid import HybridMethod
from engine.search.fulltext import TaxonMention
from engine.search.searcher import SearchFilters

NOTE = "basking on warm granite"


@pytest.fixture(scope="module")
def twins(tmp_path_factory, small_demo_collection, demo_encoder):
    """The small demo with every demo note cleared, plus a byte-identical copy of one red
    circle photo filed after it (a larger id) whose record says NOTE: the two tie under CLIP."""
    root = Path(shutil.copytree(small_demo_collection.root, tmp_path_factory.mktemp("t") / "c"))
    metadata = json.loads((root / "metadata.json").read_text(encoding="utf-8"))
    for record in metadata["images"]:
        record.pop("notes", None)
    original = next(r for r in metadata["images"] if "Circulus_ruber" in r["file_name"])
    copy_name = str(Path(original["file_name"]).with_name("zzzz-copy.jpg"))
    shutil.copyfile(root / original["file_name"], root / copy_name)
    copy_id = max(r["id"] for r in metadata["images"]) + 1
    metadata["images"].append({**original, "id": copy_id, "file_name": copy_name, "notes": NOTE})
    first = next(a for a in metadata["annotations"] if a["image_id"] == original["id"])
    next_annotation = max(a["id"] for a in metadata["annotations"]) + 1
    metadata["annotations"].append({**first, "id": next_annotation, "image_id": copy_id})
    (root / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    library = Library.open(tmp_path_factory.mktemp("t") / "lib")
    Indexer(library, demo_encoder).run(root)
    with library.catalog.session() as s:
        ids = dict(s.execute(select(Image.rel_path, Image.id)).all())
    yield library, ids[original["file_name"]], ids[copy_name]
    library.close()


def _run(library, encoder, text, spec="hybrid", top_k=200, **context_args):
    context = MethodContext(library, lambda: encoder, **context_args)
    return resolve_spec(spec).run(SearchQuery(text), context, top_k=top_k)


def _species(library: Library) -> dict[int, str]:
    with library.catalog.session() as s:
        stmt = select(Image.id, Taxon.common_name).join(Taxon, Taxon.id == Image.taxon_id)
        return dict(s.execute(stmt).all())


def test_hybrid_is_registered_with_its_parameters():
    info = {i.key: i for i in method_infos()}["hybrid"]
    assert info.available and info.kinds == ("text",)
    assert info.params["fusion"] == "weighted" and info.params["taxon"] == "boost"
    for bad, words in (
        ("hybrid:fusion=max", "fusion must be one of"),
        ("hybrid:taxon=only", "taxon must be one of"),
        ("hybrid:text_weight=2", "between 0 and 1"),
        ("hybrid:depth=0", "at least 1"),
        ("hybrid:template=no placeholder", "must contain"),
    ):
        with pytest.raises(BadInputError, match=words):
            resolve_spec(bad)


@pytest.mark.parametrize("fusion", ["weighted", "rrf"])
def test_the_photo_whose_record_says_the_words_wins_a_clip_tie(twins, demo_encoder, fusion):
    library, original, copy = twins
    query = "red circle basking on granite"
    text = _run(library, demo_encoder, query, "text")
    scores = dict(text.pairs())
    assert scores[original] == pytest.approx(scores[copy], abs=1e-6)  # the same picture
    assert text.ids.index(original) < text.ids.index(copy)  # ties go to the smaller id
    hybrid = _run(library, demo_encoder, query, f"hybrid:fusion={fusion}")
    assert hybrid.ids.index(copy) < hybrid.ids.index(original)
    evidence = hybrid.evidence[copy]
    assert evidence["record_words"]["notes"] == ["basking", "granite"]  # "on": a function word
    assert evidence["taxon"] is True
    assert "notes" not in hybrid.evidence[original]["record_words"]


def test_a_named_taxon_is_boosted_restricted_or_ignored(twins, demo_encoder):
    library, _, _ = twins
    species = _species(library)
    query = "red circle standing upright"
    red = {i for i, name in species.items() if name == "red circle"}

    restricted = _run(library, demo_encoder, query, "hybrid:taxon=restrict")
    assert set(restricted.ids) == red  # every photo of the taxon, and only those
    mention = TaxonMention.from_json(restricted.details["taxon_mention"])
    assert (mention.name, mention.rank, mention.rest, mention.count) == (
        "Circulus ruber",
        "species",
        "standing upright",
        len(red),
    )
    assert restricted.details["clip_text"] == "standing upright"
    assert restricted.details["taxon_applied"] == "restrict"
    json.dumps(restricted.details)  # plain data: a saved run keeps it

    boosted = _run(library, demo_encoder, query, top_k=len(red))
    off = _run(library, demo_encoder, query, "hybrid:taxon=off", top_k=len(red))
    assert len(red & set(boosted.ids)) > len(red & set(off.ids))
    assert off.details["taxon_applied"] == "off" and off.details["taxon_mention"] is not None
    assert all("taxon" not in e for e in off.evidence.values())
    assert all(boosted.evidence[i]["taxon"] == (i in red) for i in boosted.ids)


def test_minus_terms_push_down_on_both_sides(twins, demo_encoder):
    library, _, _ = twins
    species = _species(library)

    def red_circles(text: str) -> int:
        ranking = _run(library, demo_encoder, text, "hybrid:taxon=off", top_k=20)
        return sum(species.get(i) == "red circle" for i in ranking.ids)

    assert red_circles("circle -red") < red_circles("circle")
    ranking = _run(library, demo_encoder, "circle -red", top_k=20)
    assert ranking.details["fts_query"] == '("circle") NOT ("red")'
    assert all(
        not e["text_rank"] or species[i] != "red circle" for i, e in ranking.evidence.items()
    )


def test_filters_and_fixed_candidates_are_respected(twins, demo_encoder):
    library, _, _ = twins
    with library.catalog.session() as s:
        licences = dict(s.execute(select(Image.id, Image.license)).all())
    filters = SearchFilters(license="CC0")
    for spec in ("hybrid", "hybrid:fusion=rrf", "hybrid:taxon=restrict"):
        ranking = _run(library, demo_encoder, "red circle on sand", spec, filters=filters)
        assert ranking.ids and all(licences[i] == "CC0 1.0" for i in ranking.ids)
    everything = _run(library, demo_encoder, "green square", "text").ids
    candidates = everything[30:50]
    for spec in ("hybrid", "hybrid:fusion=rrf"):
        context = MethodContext(library, lambda: demo_encoder)
        reranked = resolve_spec(spec).run(
            SearchQuery("green square"), context, top_k=5, candidates=candidates
        )
        assert sorted(reranked.ids) == sorted(candidates)
        assert reranked.scores == sorted(reranked.scores, reverse=True)


def test_rrf_follows_the_spec_example_and_ties_share_a_rank():
    a, b, c, d = 1, 2, 3, 4
    fused = HybridMethod._rrf([[(a, 3.0), (b, 2.0), (c, 1.0)], [(b, 3.0), (c, 2.0), (d, 1.0)]], 60)
    assert [i for i, _ in fused] == [b, c, a, d]
    np.testing.assert_allclose(
        [s for _, s in fused], [0.0325225, 0.0320020, 0.0163934, 0.0158730], atol=1e-7
    )
    assert shared_ranks([(5, 2.0), (6, 1.0), (7, 1.0), (8, 0.5)]) == {5: 1, 6: 2, 7: 2, 8: 4}
    # Tied words scores do not favour the smaller id: both get 1/(60+1) from that list.
    tied = HybridMethod._rrf([[(9, 1.0), (3, 1.0)]], 60)
    assert tied[0][1] == tied[1][1] and [i for i, _ in tied] == [3, 9]


def test_rrf_ties_are_exact_sums_broken_by_best_rank_then_id():
    # k_rrf = 0: photo 1 at ranks 2, 3 and 6 scores 1/2 + 1/3 + 1/6 = 1 and photo 2 at rank 2
    # twice scores 1/2 + 1/2 = 1, a tie with the same best rank, so the smaller id comes first.
    # Summed in floating point photo 1 falls a hair short (0.9999999999999999) and would lose.
    clip = [(10, 0.9), (1, 0.8)]
    words = [(11, 9.0), (2, 8.0), (1, 7.0)]
    in_taxon = [(12, 0.9), (2, 0.8), (13, 0.7), (14, 0.6), (15, 0.5), (1, 0.4)]
    fused = HybridMethod._rrf([clip, words, in_taxon], 0)
    assert [i for i, _ in fused][:5] == [10, 11, 12, 1, 2]
    assert fused[3][1] == fused[4][1] == 1.0


def test_hybrid_runs_from_evaluate(twins, demo_encoder, small_demo_collection, capsys):
    from app.cli import main

    library, _, _ = twins
    args = [
        "evaluate",
        "--queries",
        str(small_demo_collection.queries_path),
        "--judgments",
        str(small_demo_collection.judgments_path),
        "--library",
        str(library.root),
        "--k",
        "10",
        "--method",
        "text",
        "--method",
        "hybrid",
        "--json",
    ]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert list(result["methods"]) == ["text", "hybrid"]
    assert result["methods"]["hybrid"]["queries"] == 60
    assert 0.0 < result["methods"]["hybrid"]["mAP@10"] <= 1.0
    assert result["comparisons"][0]["method"] == "hybrid"
