"""The ONNX runtime on the CPU: export, verification against torch, refusal, the command line's
`--runtime`, `models list --json`, and a text search that never imports torch."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.errors import BadInputError
from engine.models import onnx_runtime
from engine.models.encoders import load_encoder
from engine.models.onnx_runtime import (
    PROBE_COSINE,
    ClipTokenizer,
    OnnxEncoder,
    export_folder,
    read_export,
)

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def onnx_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model store holding the demo model's ONNX export (made once for the module)."""
    store = tmp_path_factory.mktemp("store")
    encoder = load_encoder("demo", device="cpu", store_dir=store, runtime="onnx")
    assert isinstance(encoder, OnnxEncoder)
    return store


def _demo_photos(collection, count: int) -> list[Path]:
    return sorted(collection.root.rglob("*.jpg"))[:count]


def test_demo_exports_both_towers_with_the_torch_vectors(
    onnx_store: Path, demo_encoder, small_demo_collection
) -> None:
    from PIL import Image

    encoder = load_encoder("demo", device="cpu", store_dir=onnx_store, runtime="auto")
    assert isinstance(encoder, OnnxEncoder)
    assert encoder.model_key == demo_encoder.model_key  # libraries need no re-indexing
    export = read_export(onnx_store, encoder.model_key)
    assert export is not None and export.image.usable and export.text.usable
    names = {p.name for p in export.folder.iterdir()}
    assert names == {"image.onnx", "text.onnx", "onnx.json", "checked.json"}
    assert export.image.min_cosine is not None and export.image.min_cosine >= PROBE_COSINE
    assert encoder.image_size == demo_encoder.image_size

    images = [Image.open(path) for path in _demo_photos(small_demo_collection, 12)]
    cosines = np.sum(encoder.encode_images(images) * demo_encoder.encode_images(images), axis=1)
    assert cosines.min() >= PROBE_COSINE
    texts = ["a yellow square", "Quadratum flavum!", "x " * 80, ""]
    cosines = np.sum(encoder.encode_texts(texts) * demo_encoder.encode_texts(texts), axis=1)
    assert cosines.min() >= PROBE_COSINE


def test_an_export_is_made_once_per_model_key(onnx_store: Path) -> None:
    folder = export_folder(onnx_store, load_encoder("demo", device="cpu").model_key)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    load_encoder("demo", device="cpu", store_dir=onnx_store, runtime="onnx")
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_a_tower_below_the_probe_cosine_is_refused_and_torch_encodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # No float model reaches a cosine of 1.5: both towers fail verification.
    monkeypatch.setattr(onnx_runtime, "PROBE_COSINE", 1.5)
    with caplog.at_level(logging.WARNING, logger="engine.models.onnx_runtime"):
        encoder = load_encoder("demo", device="cpu", store_dir=tmp_path, runtime="onnx")
    assert not isinstance(encoder, OnnxEncoder)
    assert encoder.device == "cpu"
    export = read_export(tmp_path, encoder.model_key)
    assert export is not None and export.runtimes == ["torch"]
    assert export.image.refused is not None and "below 1.5" in export.image.refused
    assert not (export.folder / "image.onnx").exists()  # a refused graph is not kept
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 2 and all("\n" not in line for line in refusals)

    # The refusal is kept for this exporter; another torch tries again (and now passes).
    monkeypatch.setattr(onnx_runtime, "PROBE_COSINE", PROBE_COSINE)
    again = load_encoder("demo", device="cpu", store_dir=tmp_path, runtime="onnx")
    assert not isinstance(again, OnnxEncoder)
    monkeypatch.setattr(onnx_runtime, "_exporter", lambda: "torch 99.0")
    newer = load_encoder("demo", device="cpu", store_dir=tmp_path, runtime="onnx")
    assert isinstance(newer, OnnxEncoder)


def test_a_search_does_not_export_unless_onnx_is_asked_for(tmp_path: Path) -> None:
    encoder = load_encoder("demo", device="cpu", store_dir=tmp_path, runtime="auto", export=False)
    assert not isinstance(encoder, OnnxEncoder)
    assert not (tmp_path / ".onnx").exists()


def test_onnx_runs_on_the_cpu_only() -> None:
    with pytest.raises(BadInputError, match="CPU"):
        load_encoder("demo", device="cuda", runtime="onnx")
    with pytest.raises(BadInputError, match="runtime 'tensorrt'"):
        load_encoder("demo", device="cpu", runtime="tensorrt")


def test_the_torch_free_tokenizer_gives_open_clips_tokens() -> None:
    import open_clip

    theirs = open_clip.get_tokenizer("ViT-B-32")
    texts = [
        "a photo of a Great Blue Heron",
        "  Fungi\ton   a fallen log  ",
        "Ünïcödé — &amp;amp; naïve café's 12 birds!!",
        "<start_of_text> x",
        "日本の鳥",
        "word " * 100,  # cut at the context length, ending in the end token
        "",
    ]
    for length in (77, 16):
        mine = ClipTokenizer().tokens(texts, length)
        assert np.array_equal(mine, theirs(texts, context_length=length).numpy())


def test_the_settings_runtimes_are_the_engines() -> None:
    from app.settings import RUNTIMES, Settings

    assert RUNTIMES == onnx_runtime.RUNTIMES
    assert Settings().runtime == "auto"
    assert Settings(runtime="tensorrt").problems() == [
        "Runtime: 'tensorrt' is not one of auto, torch, onnx"
    ]


def test_same_top_ten_whichever_runtime_encodes(
    onnx_store: Path, demo_encoder, demo_collection
) -> None:
    """The done-when check on a few of the demo benchmark's queries (the bench runs all 60)."""
    import csv

    from PIL import Image

    onnx = load_encoder("demo", device="cpu", store_dir=onnx_store, runtime="onnx")
    photos = _demo_photos(demo_collection, 240)
    images = [Image.open(path) for path in photos]
    by_torch, by_onnx = demo_encoder.encode_images(images), onnx.encode_images(images)
    with (demo_collection.root / "queries.csv").open(encoding="utf-8") as handle:
        queries = [row["query_text"] for row in csv.DictReader(handle)][::10]
    for query in queries:
        top_torch = np.argsort(-(by_torch @ demo_encoder.encode_texts([query])[0]))[:10]
        top_onnx = np.argsort(-(by_onnx @ onnx.encode_texts([query])[0]))[:10]
        assert list(top_torch) == list(top_onnx), query


def _quadrat(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QUADRAT_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_cli_indexes_with_onnx_and_searches_text_without_torch(
    tmp_path: Path, small_demo_collection
) -> None:
    home, library = tmp_path / "home", tmp_path / "lib"
    photos = str(small_demo_collection.root)
    indexed = _quadrat(
        home, "index", photos, "--library", str(library), "--model", "demo", "--runtime", "onnx"
    )
    assert indexed.returncode == 0, indexed.stderr
    listed = _quadrat(home, "models", "list", "--json")
    demo_row = next(row for row in json.loads(listed.stdout) if row["spec"] == "demo")
    assert demo_row["runtimes"] == ["torch", "onnx"]

    by_torch = _quadrat(home, "search", "yellow", "--library", str(library), "--runtime", "torch")
    assert by_torch.returncode == 0, by_torch.stderr
    # The search as `quadrat search` runs it, then what it imported of what a text search on
    # the ONNX text tower does without: each costs a share of its one-second budget.
    code = (
        "import sys; from app.cli import main; code = main(['search', 'yellow', '--library', "
        f"{str(library)!r}]); print('LOADED', sorted(set({list(_NOT_FOR_A_TEXT_SEARCH)!r}) & "
        "set(sys.modules))); sys.exit(code)"
    )
    env = {**os.environ, "QUADRAT_HOME": str(home)}
    quick = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert quick.returncode == 0, quick.stderr
    assert "LOADED []\n" in quick.stdout
    assert quick.stdout.replace("LOADED []\n", "") == by_torch.stdout


_NOT_FOR_A_TEXT_SEARCH = (
    "torch",
    "open_clip",
    "torchvision",
    "transformers",
    "diffusers",
    "alembic",  # the catalog's revision is read with plain SQL when it is current
    "PIL",  # no photo is decoded
    "ftfy",  # plain ASCII queries need no text repair
    "engine.models.encoders",  # the torch encoders
    "engine.methods.feedback",  # methods other than the one asked for
    "engine.evaluation.evaluate",  # other commands' modules
)


def test_a_vision_transformer_exports_too(tmp_path: Path) -> None:
    """A ViT's attention (the demo's image tower is a ResNet) exports without torch's fused
    attention operator, which the exporter cannot write."""
    import open_clip
    from safetensors.torch import save_file

    config = {
        "embed_dim": 32,
        "vision_cfg": {
            "image_size": 32,
            "layers": 1,
            "width": 64,
            "head_width": 16,
            "patch_size": 16,
        },
        "text_cfg": {
            "context_length": 16,
            "vocab_size": 49408,
            "width": 32,
            "heads": 2,
            "layers": 1,
        },
    }
    (tmp_path / "quadrat-test-vit.json").write_text(json.dumps(config))
    open_clip.add_model_config(tmp_path / "quadrat-test-vit.json")
    model = open_clip.create_model("quadrat-test-vit")
    weights = tmp_path / "vit.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))

    encoder = load_encoder(
        f"quadrat-test-vit:{weights}", device="cpu", store_dir=tmp_path / "store", runtime="onnx"
    )
    assert isinstance(encoder, OnnxEncoder)
    assert encoder.export.image.usable and encoder.export.text.usable


def test_the_window_encodes_with_an_existing_export_and_makes_none(
    onnx_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.controllers import session

    monkeypatch.setattr(session.paths, "models_dir", lambda: onnx_store)
    assert isinstance(session.default_encoder_loader("demo", "cpu", "auto"), OnnxEncoder)
    assert not isinstance(session.default_encoder_loader("demo", "cpu", "torch"), OnnxEncoder)
    empty = tmp_path / "no-exports"
    monkeypatch.setattr(session.paths, "models_dir", lambda: empty)
    encoder = session.default_encoder_loader("demo", "cpu", "auto")
    assert not isinstance(encoder, OnnxEncoder)  # torch now; the window never waits on an export
    assert not (empty / ".onnx").exists()


def _indexed_vectors(
    library_dir: Path, encoder, photos: Path, decode: str
) -> dict[str, np.ndarray]:
    """rel_path -> the vector an indexing run with `encoder` stored for it."""
    from sqlalchemy import select

    from engine.catalog import Embedding, Image
    from engine.catalog.library import Library
    from engine.indexing.indexer import Indexer

    with Library.open(library_dir) as library:
        report = Indexer(library, encoder, batch_size=8, workers=2, decode=decode).run(photos)
        assert report.indexed > 0 and not report.all_skipped()
        with library.catalog.session() as s:
            rows = s.execute(
                select(Image.rel_path, Embedding.vector)
                .join(Embedding, Embedding.image_id == Image.id)
                .where(Embedding.model_key == encoder.model_key)
            ).all()
    return {path: np.frombuffer(blob, dtype="<f4") for path, blob in rows}


def test_onnx_indexing_resizes_in_the_decode_threads_with_the_same_vectors(
    onnx_store: Path, tmp_path: Path, demo_encoder, small_demo_collection
) -> None:
    import threading

    encoder = load_encoder("demo", device="cpu", store_dir=onnx_store, runtime="onnx")
    assert isinstance(encoder, OnnxEncoder) and encoder.pil_steps is not None
    ran_in: set[str] = set()

    def noted(step):
        def run(image):
            ran_in.add(threading.current_thread().name)
            return step(image)

        return run

    encoder._steps = [noted(step) for step in encoder.pil_steps]
    photos = small_demo_collection.root
    vectors = _indexed_vectors(tmp_path / "lib", encoder, photos, "threads")
    # Resizing and cropping ran beside the forward, in the decode threads, never in this one.
    assert ran_in and all(name.startswith("quadrat-decode") for name in ran_in), ran_in
    assert threading.current_thread().name not in ran_in
    # The vectors indexing with torch stores (decoded the same way, at reduced scale).
    by_torch = _indexed_vectors(tmp_path / "torch", demo_encoder, photos, "threads")
    assert vectors.keys() == by_torch.keys()
    assert len(vectors) == small_demo_collection.image_count
    for path, vector in vectors.items():
        assert float(vector @ by_torch[path]) >= PROBE_COSINE, path


def test_onnx_indexing_decodes_in_processes_too(
    onnx_store: Path, tmp_path: Path, small_demo_collection, caplog: pytest.LogCaptureFixture
) -> None:
    """With its resize and crop known, the ONNX encoder's photos can be decoded in worker
    processes (the default on 4 or more cores), with the vectors decoding in threads gives."""
    encoder = load_encoder("demo", device="cpu", store_dir=onnx_store, runtime="onnx")
    photos = small_demo_collection.root
    with caplog.at_level(logging.INFO, logger="engine.indexing"):
        in_processes = _indexed_vectors(tmp_path / "processes", encoder, photos, "processes")
    assert not [r for r in caplog.records if "decoding in threads" in r.getMessage()]
    in_threads = _indexed_vectors(tmp_path / "threads", encoder, photos, "threads")
    assert in_processes.keys() == in_threads.keys()
    for path, vector in in_threads.items():
        assert np.allclose(in_processes[path], vector, atol=1e-6), path
