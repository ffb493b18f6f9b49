"""The export registry's built-in entries (engine/io/builtin_formats.py) write what the
formats' own functions write: a script can run any format by its name."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.catalog.library import Library
from engine.io.camtrap_dp import export_camtrap_dp
from engine.io.dwc import export_dwc_csv, export_dwca
from engine.io.export import export_judgments
from engine.io.formats import export_formats, get_format
from engine.io.photo_copies import copy_relevant_photos
from tests.places import Places, build_places
from tests.test_camtrap_dp import DEER, SPECIES, _query_id


def test_every_format_has_a_writer_and_a_description():
    found = export_formats()
    assert [f.name for f in found] == [
        "judgments", "relevant-photos", "xmp", "dwca", "dwc-csv", "camtrap-dp", "geojson",
    ]  # fmt: skip
    assert all(f.write is not None and f.description for f in found)


@pytest.fixture
def places(tmp_path: Path, demo_encoder) -> Places:
    return build_places(tmp_path, demo_encoder)


def test_builtin_formats_write_as_their_own_functions(places, tmp_path: Path):
    out = tmp_path / "registry"
    own = tmp_path / "own"
    out.mkdir()
    own.mkdir()
    with Library.open(places.root) as library:
        q = places.query_id
        said = get_format("judgments").run(library, q, out / "j.csv", fmt="qrels")
        rows = export_judgments(library, own / "j.csv", [q], fmt="qrels")
        assert said.summary() == f"{rows} judgments written to {out / 'j.csv'}"
        assert (out / "j.csv").read_bytes() == (own / "j.csv").read_bytes()

        options = {"media_url": "https://example.org/photos", "sensitive_taxa": False}
        said = get_format("dwc-csv").run(library, q, out / "r.csv", **options, unknown=1)
        report = export_dwc_csv(library, q, own / "r.csv", **options)
        assert said.summary().replace(str(out), str(own)) == report.summary()
        assert (out / "r.csv").read_bytes() == (own / "r.csv").read_bytes()

        said = get_format("dwca").run(library, q, out / "r.zip")
        report = export_dwca(library, q, own / "r.zip")
        assert said.summary().replace(str(out), str(own)) == report.summary()

        said = get_format("relevant-photos").run(library, q, out / "photos")
        copied = copy_relevant_photos(library, q, own / "photos")
        assert said.summary() == copied.summary(out / "photos")
        assert sorted(p.name for p in (out / "photos").iterdir()) == sorted(
            p.name for p in (own / "photos").iterdir()
        )

        said = get_format("xmp").run(library, q, None)
        assert said.summary()
        assert (places.photos / "open.jpg.xmp").is_file() or (places.photos / "open.xmp").is_file()


def test_camtrap_dp_writes_as_its_own_function(camera_trap_library: Path):
    with Library.open(camera_trap_library / "lib") as library:
        q = _query_id(library, f"a {SPECIES[0].colour} circle: ")
        options = {"scientific_name": DEER, "include_restricted": True}
        said = get_format("camtrap-dp").run(library, q, camera_trap_library / "reg", **options)
        report = export_camtrap_dp(library, q, camera_trap_library / "own", **options)
    assert said.summary().replace("reg", "own") == report.summary()
    for name in ("deployments.csv", "media.csv", "observations.csv"):
        assert (camera_trap_library / "reg" / name).read_bytes() == (
            camera_trap_library / "own" / name
        ).read_bytes()
