"""The indexed demo library built once per session opens, as a copy, as a library of its own."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select, update

from engine.catalog import Image, Taxon
from engine.catalog.binding import BINDING_FILE
from engine.catalog.library import Library
from engine.methods import SearchQuery, search_hits
from engine.models.encoders import Encoder


def _top10(library: Library, encoder: Encoder) -> list[tuple[int, float]]:
    hits = search_hits(library, encoder, SearchQuery("red circle"), top_k=10)
    return [(hit.image_id, hit.score) for hit in hits]


def test_a_copied_library_opens_as_itself_and_changes_stay_in_the_copy(
    tmp_path: Path, indexed_small_demo: Path, copy_small_demo_library, demo_encoder,
    small_demo_collection,
) -> None:  # fmt: skip
    copy = copy_small_demo_library(tmp_path / "lib")
    assert not (copy / BINDING_FILE).exists()
    with Library.open(indexed_small_demo) as template:
        expected = _top10(template, demo_encoder)
    with Library.open(copy) as library:
        # Its own catalog file, not the template's, and every photo at the shared folder.
        assert Path(library.catalog.path).resolve() == (copy / "catalog.sqlite3").resolve()
        assert library.check_consistency(demo_encoder.model_key).rebuilt is False
        assert _top10(library, demo_encoder) == expected
        with library.catalog.session() as s:
            assert s.scalar(select(func.count(Image.id))) == small_demo_collection.image_count
            s.execute(update(Taxon).values(common_name="renamed"))
    with Library.open(indexed_small_demo) as template, template.catalog.session() as s:
        assert "renamed" not in set(s.scalars(select(Taxon.common_name)))
