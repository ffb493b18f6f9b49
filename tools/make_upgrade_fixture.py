"""Write the "upgrades keep data" fixture: a library and a settings file as this version writes
them, for tests/test_upgrade.py to open with the code of every later version.

    python tools/make_upgrade_fixture.py [--out tests/data/upgrade]

Writes into OUT:
- `settings.json`, as `app.settings.save_settings` writes it (every value away from its default);
- `library/`, a library folder: the catalog (the demo collection's plain photos, one per species,
  indexed with the demo model, with two saved queries, their runs and judgments, relevant and
  not) and the demo model's vector index;
- `expected.json`: what a user must find again after an upgrade (the settings' values, each
  query's text, name, notes and run methods, each judgment by photo path).

The photos themselves are not kept: a library remembers judgments of photos that are missing
from disk, and an upgrade must keep those too. The collection's folder is recorded under a
neutral path so that the fixture names no machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "tests" / "data" / "upgrade"
NEUTRAL_ROOT = "/photos/demo-collection"  # the collection's folder as the catalog records it
QUERIES = (
    # (text, name, notes, photos judged from the top of the text search)
    ("red circle", "Red circles", "all species photos", 4),
    ("blue square", None, "a judged negative must survive too", 3),
)


def _settings(out: Path) -> dict[str, object]:
    from app.settings import Settings, save_settings

    settings = Settings(
        model="demo",
        device="cpu",
        batch_size=16,
        library_dir="/srv/quadrat/library",
        top_k=500,
        metrics_k=20,
        generator="demo-painter",
        llm_url="http://localhost:11434/v1",
        llm_model="llama3.1",
    )
    save_settings(settings, out / "settings.json")
    return asdict(settings)


def _library(out: Path, work: Path) -> list[dict[str, object]]:
    from sqlalchemy import func, select, update

    from engine.catalog import Collection, Image
    from engine.catalog.library import Library
    from engine.demo.collection import write_demo_collection
    from engine.indexing.indexer import Indexer
    from engine.judgments.queries import QueryStore
    from engine.methods import SearchQuery, search_hits
    from engine.models.encoders import load_encoder

    demo = write_demo_collection(work / "demo", images_per_class=1, photos_per_query=1)
    photos = work / "photos"
    # One plain photo per species: a dozen photos are enough to carry runs and judgments.
    for rel_path, kind in demo.kinds.items():
        if kind == "species":
            (photos / rel_path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(demo.root / rel_path, photos / rel_path)
    encoder = load_encoder("demo", device="cpu")
    library_dir = out / "library"
    saved: list[dict[str, object]] = []
    with Library.open(library_dir) as library:
        Indexer(library, encoder, batch_size=16, workers=1).run(photos, metadata=demo.metadata_path)
        store = QueryStore(library, user="fixture")
        for text, name, notes, judged in QUERIES:
            hits = search_hits(library, encoder, SearchQuery(text), top_k=12)
            query_id = store.find_or_create_query(text)
            store.save_run(
                query_id, "text", [(h.image_id, h.score) for h in hits], model_key=encoder.model_key
            )
            store.rename_query(query_id, name)
            store.set_notes(query_id, notes)
            judgments = {}
            for hit in hits[:judged]:
                relevance = int(demo.labels[hit.rel_path] == text)
                store.judge(query_id, hit.image_id, relevance)
                judgments[hit.rel_path] = relevance
            saved.append(
                {
                    "text": text,
                    "name": name,
                    "notes": notes,
                    "runs": ["text"],
                    "judgments": judgments,
                }
            )
        with library.catalog.session() as s:
            s.execute(update(Collection).values(root=NEUTRAL_ROOT, metadata_file=None))
            photos_indexed = s.scalar(select(func.count(Image.id)))
        model_key = library.model_key
        library.judgments_saved()  # no backup folder in the fixture
    for transient in ("backups", "thumbnails", "indexing.lock", "catalog.sqlite3.lock"):
        path = library_dir / transient
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    return [{"photos_indexed": photos_indexed, "model_key": model_key}, *saved]


def make_fixture(out: Path) -> None:
    """(Re)write the fixture into `out`."""
    if (out / "library").exists():
        shutil.rmtree(out / "library")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="quadrat-fixture-") as tmp:
        settings = _settings(out)
        library, *queries = _library(out, Path(tmp))
    expected = {"settings": settings, "library": library, "queries": queries}
    (out / "expected.json").write_text(json.dumps(expected, indent=2) + "\n", encoding="utf-8")
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"upgrade fixture written to {out} ({size / 1024:.0f} KiB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    make_fixture(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
