"""An ONNX export is bound to its model and to its own files: another model's export of the same
shape, a truncated or random file, or a record naming a file outside the export (an absolute
path, `..`, a link) is never run. Each is refused in one line and torch encodes, through the
paths searches really take: the window's loader (an export already there), `quadrat search`'s
torch-free text tower, and `quadrat search` itself; where an export may be made (runtime
onnx), a refused one is made again."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.models.encoders import load_encoder
from engine.models.onnx_checks import file_record
from engine.models.onnx_runtime import (
    OnnxEncoder,
    export_folder,
    read_export,
    text_encoder_from_store,
)
from engine.models.spec import DEMO_ARCH, demo_weights_path

TEXTS = ["a yellow square", "a red circle", "Quadratum flavum!"]
REFUSED = "not used"  # the one line's words (engine.models.onnx_runtime._checked)


@pytest.fixture(scope="module")
def other_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another model of the demo's architecture: the demo's weights, perturbed."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(demo_weights_path()))
    generator = torch.Generator().manual_seed(7)
    changed = {
        name: (t + 0.05 * torch.randn(t.shape, generator=generator)).contiguous()
        if t.is_floating_point() and "running_" not in name  # batch norm's statistics kept
        else t
        for name, t in weights.items()
    }
    path = tmp_path_factory.mktemp("other") / "other.safetensors"
    save_file(changed, str(path))
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, other_weights: Path) -> dict[str, Path]:
    """Two stores, each holding one model's export: the demo's and the other model's."""
    made = {}
    for name, spec in (("demo", "demo"), ("other", f"{DEMO_ARCH}:{other_weights}")):
        store = tmp_path_factory.mktemp(f"store-{name}")
        encoder = load_encoder(spec, device="cpu", store_dir=store, runtime="onnx")
        assert isinstance(encoder, OnnxEncoder)
        assert encoder.export.image.usable and encoder.export.text.usable
        made[name] = store
    return made


@pytest.fixture
def store(tmp_path: Path, stores: dict[str, Path]) -> Path:
    """A copy of the demo's store, for the test to spoil."""
    return Path(shutil.copytree(stores["demo"], tmp_path / "store"))


def _demo_export(store: Path, demo_encoder) -> Path:
    return export_folder(store, demo_encoder.model_key)


def _other_export(stores: dict[str, Path]) -> Path:
    (folder,) = (stores["other"] / ".onnx").iterdir()
    return folder


def _rewrite_record(folder: Path, **changes) -> None:
    record = json.loads((folder / "onnx.json").read_text(encoding="utf-8"))
    for key, value in changes.items():
        if isinstance(value, dict):
            record[key].update(value)
        else:
            record[key] = value
    (folder / "onnx.json").write_text(json.dumps(record), encoding="utf-8")


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if REFUSED in r.getMessage()]


def _assert_torch_encodes(store: Path, demo_encoder, caplog, *, words: str) -> None:
    """The window's loader and the torch-free text search both refuse the export, in one line
    naming `words`, and the vectors are the demo model's own."""
    with caplog.at_level(logging.WARNING, logger="engine.models.onnx_runtime"):
        encoder = load_encoder("demo", device="cpu", store_dir=store, runtime="auto", export=False)
        quick = text_encoder_from_store(store, demo_encoder.model_key, "demo", lambda: encoder)
    vectors = encoder.encode_texts(TEXTS)
    assert np.allclose(vectors, demo_encoder.encode_texts(TEXTS), atol=1e-5)
    if isinstance(encoder, OnnxEncoder):  # only the image tower may still run in ONNX
        assert not encoder.export.text.usable
    assert quick is None
    lines = _refusals(caplog)
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert words in lines[0], lines[0]


def test_a_sound_export_is_used_on_every_path(store: Path, demo_encoder, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="engine.models.onnx_runtime"):
        encoder = load_encoder("demo", device="cpu", store_dir=store, runtime="auto", export=False)
        quick = text_encoder_from_store(store, demo_encoder.model_key, "demo", lambda: encoder)
    assert isinstance(encoder, OnnxEncoder) and isinstance(quick, OnnxEncoder)
    assert np.allclose(quick.encode_texts(TEXTS), demo_encoder.encode_texts(TEXTS), atol=1e-4)
    assert _refusals(caplog) == []


def test_another_models_tower_files_copied_in_are_refused(
    store: Path, stores: dict[str, Path], demo_encoder, caplog
) -> None:
    ours, theirs = _demo_export(store, demo_encoder), _other_export(stores)
    for name in ("image.onnx", "text.onnx"):
        shutil.copyfile(theirs / name, ours / name)
    # The other model's text tower really answers otherwise (what a user would have got).
    other = text_encoder_from_store(stores["other"], read_export_key(theirs), "x", lambda: None)
    assert other is not None
    assert not np.allclose(other.encode_texts(TEXTS), demo_encoder.encode_texts(TEXTS), atol=1e-2)
    _assert_torch_encodes(store, demo_encoder, caplog, words="is not the file exported")


def read_export_key(folder: Path) -> str:
    return str(json.loads((folder / "onnx.json").read_text(encoding="utf-8"))["model_key"])


def test_another_models_whole_export_under_this_key_is_refused(
    store: Path, stores: dict[str, Path], demo_encoder, caplog
) -> None:
    ours = _demo_export(store, demo_encoder)
    shutil.rmtree(ours)
    shutil.copytree(_other_export(stores), ours)
    _rewrite_record(ours, model_key=demo_encoder.model_key, spec="demo")
    _assert_torch_encodes(store, demo_encoder, caplog, words="made from other weights")


@pytest.mark.parametrize("spoil", ["truncated", "random bytes"])
def test_a_truncated_or_random_file_is_refused(
    spoil: str, store: Path, demo_encoder, caplog
) -> None:
    text = _demo_export(store, demo_encoder) / "text.onnx"
    data = text.read_bytes()
    if spoil == "truncated":
        text.write_bytes(data[: len(data) // 2])
        words = "cut short or replaced"
    else:
        text.write_bytes(np.random.default_rng(1).bytes(len(data)))
        words = "is not the file exported"
    _assert_torch_encodes(store, demo_encoder, caplog, words=words)


def test_a_recorded_file_onnxruntime_cannot_open_falls_back_once(
    store: Path, demo_encoder, caplog
) -> None:
    """Random bytes with a record to match (as a broken exporter might leave): no raw
    `InvalidProtobuf` on every search, one line and torch."""
    folder = _demo_export(store, demo_encoder)
    text = folder / "text.onnx"
    text.write_bytes(np.random.default_rng(2).bytes(text.stat().st_size))
    _rewrite_record(folder, text=file_record(text))
    quick = text_encoder_from_store(store, demo_encoder.model_key, "demo", lambda: demo_encoder)
    assert quick is not None  # the record holds: onnxruntime is the one to say no
    with caplog.at_level(logging.WARNING, logger="engine.models.onnx_runtime"):
        for _ in range(2):
            vectors = quick.encode_texts(TEXTS)
            assert np.allclose(vectors, demo_encoder.encode_texts(TEXTS), atol=1e-6)
    lines = _refusals(caplog)
    assert len(lines) == 1 and "text.onnx does not open" in lines[0], lines
    assert "\n" not in lines[0]


@pytest.mark.parametrize("where", ["absolute path", "dot-dot", "a link", "a linked folder"])
def test_a_file_outside_the_export_is_refused(
    where: str, store: Path, stores: dict[str, Path], tmp_path: Path, demo_encoder, caplog
) -> None:
    """The record (or the folder) leads elsewhere, to a file whose hashes the record matches."""
    folder = _demo_export(store, demo_encoder)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(_other_export(stores), elsewhere)
    target = elsewhere / "text.onnx"
    if where == "absolute path":
        _rewrite_record(folder, text={"file": str(target), **file_record(target)})
        words = "names"
    elif where == "dot-dot":
        shutil.copytree(elsewhere, folder.parent / "next-door")
        named = "../next-door/text.onnx"
        _rewrite_record(folder, text={"file": named, **file_record(folder / named)})
        words = "names"
    elif where == "a link":
        (folder / "text.onnx").unlink()
        (folder / "text.onnx").symlink_to(target)
        _rewrite_record(folder, text=file_record(target))
        words = "text.onnx is a link"
    else:
        shutil.copyfile(folder / "onnx.json", elsewhere / "onnx.json")
        _rewrite_record(elsewhere, text=file_record(target))
        shutil.rmtree(folder)
        folder.symlink_to(elsewhere, target_is_directory=True)
        words = "is a link"
    _assert_torch_encodes(store, demo_encoder, caplog, words=words)
    assert target.is_file()  # nothing outside the store was touched


def test_where_an_export_may_be_made_a_refused_one_is_made_again(
    store: Path, tmp_path: Path, stores: dict[str, Path], demo_encoder, caplog
) -> None:
    folder = _demo_export(store, demo_encoder)
    elsewhere = Path(shutil.copytree(folder, tmp_path / "elsewhere"))
    shutil.copyfile(_other_export(stores) / "text.onnx", elsewhere / "text.onnx")
    shutil.rmtree(folder)
    folder.symlink_to(elsewhere, target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="engine.models.onnx_runtime"):
        encoder = load_encoder("demo", device="cpu", store_dir=store, runtime="onnx")
    assert isinstance(encoder, OnnxEncoder) and encoder.export.text.usable
    assert np.allclose(encoder.encode_texts(TEXTS), demo_encoder.encode_texts(TEXTS), atol=1e-4)
    assert any("exporting it again" in r.getMessage() for r in caplog.records)
    assert folder.is_dir() and not folder.is_symlink()  # a real folder in the store now
    assert sorted(p.name for p in elsewhere.iterdir()) == sorted(  # the link's target untouched
        ["checked.json", "image.onnx", "onnx.json", "text.onnx"]
    )
    assert read_export(store, demo_encoder.model_key) is not None


def test_quadrat_search_with_a_spoilt_text_tower_answers_as_torch(
    copy_cli_small_demo_library, stores: dict[str, Path], tmp_path: Path, capsys, caplog
) -> None:
    from app import paths
    from app.cli import main

    library = copy_cli_small_demo_library(tmp_path / "lib")
    assert main(["search", "yellow", "--library", str(library), "--runtime", "torch"]) == 0
    by_torch = capsys.readouterr().out
    shutil.copytree(stores["demo"], paths.models_dir())
    (text,) = paths.models_dir().glob(".onnx/*/text.onnx")
    os.truncate(text, text.stat().st_size // 3)
    with caplog.at_level(logging.WARNING):
        code = main(["search", "yellow", "--library", str(library)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == by_torch
    assert "InvalidProtobuf" not in captured.err and "Traceback" not in captured.err
    assert len(_refusals(caplog)) == 1


def _as_older_export(folder: Path) -> None:
    """The record as exports were written before they were bound (format 1: no hashes)."""
    record = json.loads((folder / "onnx.json").read_text(encoding="utf-8"))
    record["format"] = 1
    record.pop("weights_sha256")
    for tower in ("image", "text"):
        for key in ("size", "sha256", "sample_sha256"):
            record[tower].pop(key)
    (folder / "onnx.json").write_text(json.dumps(record), encoding="utf-8")
    (folder / "checked.json").unlink()


def test_an_older_export_is_checked_against_the_model_once_and_kept(
    store: Path, demo_encoder, caplog
) -> None:
    folder = _demo_export(store, demo_encoder)
    _as_older_export(folder)
    mtimes = {name: (folder / name).stat().st_mtime_ns for name in ("image.onnx", "text.onnx")}
    # The window's loader makes no export, yet keeps this one: torch checked it on the probes.
    encoder = load_encoder("demo", device="cpu", store_dir=store, runtime="auto", export=False)
    assert isinstance(encoder, OnnxEncoder) and encoder.export.text.usable
    assert {n: (folder / n).stat().st_mtime_ns for n in mtimes} == mtimes  # not made again
    bound = read_export(store, demo_encoder.model_key)
    assert bound is not None and bound.weights_sha256 is not None
    assert bound.text.hashes and bound.text.hashes["sha256"]
    quick = text_encoder_from_store(store, demo_encoder.model_key, "demo", lambda: encoder)
    assert quick is not None  # the torch-free text search takes it from now on
    assert _refusals(caplog) == []


def test_an_older_export_holding_another_models_tower_is_not_kept(
    store: Path, stores: dict[str, Path], demo_encoder
) -> None:
    folder = _demo_export(store, demo_encoder)
    shutil.copyfile(_other_export(stores) / "text.onnx", folder / "text.onnx")
    _as_older_export(folder)
    assert text_encoder_from_store(store, demo_encoder.model_key, "demo", lambda: None) is None
    encoder = load_encoder("demo", device="cpu", store_dir=store, runtime="auto", export=False)
    assert np.allclose(encoder.encode_texts(TEXTS), demo_encoder.encode_texts(TEXTS), atol=1e-5)
    assert not isinstance(encoder, OnnxEncoder)
    remade = load_encoder("demo", device="cpu", store_dir=store, runtime="onnx")
    assert isinstance(remade, OnnxEncoder) and remade.export.text.usable
    assert np.allclose(remade.encode_texts(TEXTS), demo_encoder.encode_texts(TEXTS), atol=1e-4)
