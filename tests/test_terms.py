"""Positive and negative terms ("red circle -square +yellow"): parsing, the vector arithmetic,
and what they do to the text method's ranking on the demo."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select

from engine.catalog import Image, Taxon
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.methods import MethodContext, SearchQuery, resolve_spec
from engine.methods.text import TextMethod, TextParams
from engine.terms import QueryTerms, combine_vectors, parse_terms


@pytest.mark.parametrize(
    ("text", "base", "plus", "minus"),
    [
        ("red circle -square +yellow", "red circle", ("yellow",), ("square",)),
        ('circle -"blue square" +"on sand"', "circle", ("on sand",), ("blue square",)),
        ("red-eyed vireo", "red-eyed vireo", (), ()),
        ("blue-green  circle", "blue-green circle", (), ()),
        ("-red circle", "circle", (), ("red",)),
        ("+yellow", "", ("yellow",), ()),
        ("circle - red", "circle - red", (), ()),  # a lone sign is a word
        ("-5 degrees", "-5 degrees", (), ()),  # a number is not a term
        ("a+b c", "a+b c", (), ()),  # a sign inside a word
        ('circle -"unclosed', "circle", (), ("unclosed",)),
        ("", "", (), ()),
    ],
)
def test_terms_are_parsed_as_rclip_writes_them(text, base, plus, minus):
    terms = parse_terms(text)
    assert terms == QueryTerms(base, plus, minus)
    assert terms.has_terms == bool(plus or minus)


def test_the_query_vector_is_the_normalised_sum_of_unit_vectors():
    base, plus, minus = np.array([3.0, 0, 0]), np.array([0, 2.0, 0]), np.array([0, 0, 5.0])
    got = combine_vectors(base, [plus], [minus])
    np.testing.assert_allclose(got, np.array([1, 1, -1]) / np.sqrt(3), rtol=1e-6)
    np.testing.assert_allclose(combine_vectors(None, [plus], []), [0, 1, 0])
    # Each vector counts once, whatever its length.
    np.testing.assert_allclose(
        combine_vectors(np.array([100.0, 0]), [np.array([0, 0.01])], []),
        np.array([1, 1]) / np.sqrt(2),
        rtol=1e-6,
    )
    with pytest.raises(ValueError):
        combine_vectors(None, [], [minus])


@pytest.fixture(scope="module")
def library(tmp_path_factory, copy_small_demo_library):
    lib = Library.open(copy_small_demo_library(tmp_path_factory.mktemp("terms") / "lib"))
    yield lib
    lib.close()


def _species(library: Library) -> dict[int, str]:
    with library.catalog.session() as s:
        stmt = select(Image.id, Taxon.common_name).join(Taxon, Taxon.id == Image.taxon_id)
        return dict(s.execute(stmt).all())


def _run(library, encoder, text: str, spec: str = "text", top_k: int = 108):
    context = MethodContext(library, lambda: encoder)
    return resolve_spec(spec).run(SearchQuery(text), context, top_k=top_k)


@pytest.mark.parametrize("template", ["{query}", "a photo of {query}", "ensemble"])
@pytest.mark.parametrize("text", ["red circle", "red-eyed circle", "two blue squares - 3"])
def test_without_terms_the_text_ranking_is_exactly_what_it_was(
    library, demo_encoder, text, template
):
    """The ranking before + and - terms existed: the template's vector searched as it is."""
    params = TextParams(template=template)
    vector = TextMethod.text_vector(text, params, demo_encoder)
    vector = vector / (np.linalg.norm(vector) or 1.0)
    context = MethodContext(library, lambda: demo_encoder)
    expected = context.searcher.ranked(vector, 60)
    got = _run(library, demo_encoder, text, f"text:template={template}", top_k=60)
    assert got.pairs() == expected
    assert "terms" not in got.details


def test_a_minus_term_pushes_its_photos_down(library, demo_encoder):
    species = _species(library)

    def red_circles_in_top(text: str, k: int = 20) -> int:
        ranking = _run(library, demo_encoder, text)
        return sum(species.get(i) == "red circle" for i in ranking.ids[:k])

    def mean_rank(text: str, name: str) -> float:
        ranking = _run(library, demo_encoder, text)
        return float(np.mean([r for r, i in enumerate(ranking.ids) if species.get(i) == name]))

    assert red_circles_in_top("circle -red") < red_circles_in_top("circle")
    assert mean_rank("circle -red", "red circle") > mean_rank("circle", "red circle") + 10
    # A plus term pulls its photos up.
    assert mean_rank("circle +yellow", "yellow circle") < mean_rank("circle", "yellow circle")
    ranking = _run(library, demo_encoder, "circle -red +yellow")
    assert ranking.details["terms"] == {"base": "circle", "plus": ["yellow"], "minus": ["red"]}


def test_a_query_of_minus_terms_alone_is_refused(library, demo_encoder):
    with pytest.raises(BadInputError, match="only - terms"):
        _run(library, demo_encoder, "-red -square")
    with pytest.raises(BadInputError, match="only - terms"):
        _run(library, demo_encoder, "-red", "hybrid")


def test_terms_work_from_the_command_line(library, capsys):
    import json

    from app.cli import main

    def red_circles(text: str) -> int:
        args = ["search", text, "--library", str(library.root), "--top", "20", "--json"]
        assert main(args) == 0
        hits = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
        assert len(hits) == 20
        return sum(hit["common_name"] == "red circle" for hit in hits)

    assert red_circles("circle -red") < red_circles("circle")
