"""Offline packs of image generators and VLMs (folders of many files): a tiny diffusers pipeline
and a tiny transformers VLM are downloaded from a stand-in hub, packed, imported into a fresh
store on a machine without a network, found there as the catalogue's model of their role and
loaded through the paths the methods use; and hostile packs of these roles (paths out of the
folder, links, twins, code, pickles, broken weights) install nothing."""

from __future__ import annotations

import hashlib
import json
import stat
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from app.cli import main
from engine.errors import BadInputError
from engine.models.folders import MANIFEST_NAME
from engine.models.packs import PACK_FORMAT
from engine.models.store import ModelStore
from tests.test_model_roles import _repository_hub, stand_in  # noqa: F401 - the fixture
from tests.test_models import closed_port

GENERATOR = "hf-hub:stabilityai/sd-turbo"
VLM = "hf-hub:HuggingFaceTB/SmolVLM-256M-Instruct"


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def generator_folder(tiny_sd_dir: Path, tmp_path_factory) -> Path:
    """The tiny pipeline as the catalogue's download holds it: fp16 weights only."""
    from tests.test_diffusers_backend import _fp16_only

    return _fp16_only(tiny_sd_dir, tmp_path_factory.mktemp("pack-sd") / "pipeline")


@pytest.fixture(scope="module")
def vlm_folder(tmp_path_factory) -> Path:
    from tests.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("pack-vlm") / "model")


def _downloaded(tmp_path: Path, stand_in, spec: str, folder: Path) -> ModelStore:  # noqa: F811
    hub = stand_in(_repository_hub(_files(folder), spec.removeprefix("hf-hub:")))
    store = ModelStore(tmp_path / "connected", endpoint=hub.url)
    store.download(spec)
    return store


def _offline_store(tmp_path: Path) -> ModelStore:
    """A fresh store whose hub cannot be reached: everything must come from the pack."""
    return ModelStore(tmp_path / "offline", endpoint=f"http://127.0.0.1:{closed_port()}")


def nothing_left(store: ModelStore) -> None:
    left = list(store.root.iterdir()) if store.root.exists() else []
    assert left == [], left


# --- a pack of each role, carried to an offline machine ------------------------------------


def test_a_generator_pack_imports_offline_and_draws_what_the_download_draws(
    tmp_path: Path,
    stand_in,  # noqa: F811 - the imported fixture
    generator_folder: Path,
) -> None:
    from engine.progress import CancelToken
    from engine.visret.generator import DrawSettings, load_generator

    connected = _downloaded(tmp_path, stand_in, GENERATOR, generator_folder)
    (tmp_path / "packs").mkdir()
    pack = connected.pack(GENERATOR, tmp_path / "packs")  # a folder: named after the model
    assert pack.is_file() and pack.parent == tmp_path / "packs"

    offline = _offline_store(tmp_path)
    model = offline.import_pack(pack)
    assert model.role == "generator" and model.origin == "pack"
    assert offline.folder(GENERATOR) == model.path  # the store finds it as the catalogue's
    assert offline.is_installed(GENERATOR)
    assert model.model_key.startswith(f"{GENERATOR} [pack sha256-")
    assert model.path is not None and model.path.resolve() != connected.folder(GENERATOR)
    assert _files(model.path).keys() - {MANIFEST_NAME} == _files(generator_folder).keys()

    settings = DrawSettings(steps=1, guidance=0.0, width=64, height=64)
    drawn = [
        np.asarray(
            load_generator(str(folder), device="cpu").draw(
                "a red circle", 5, settings, lambda _: None, CancelToken()
            )
        )
        for folder in (connected.folder(GENERATOR), model.path)
    ]
    np.testing.assert_array_equal(drawn[0], drawn[1])


def test_a_vlm_pack_imports_offline_and_answers_as_the_download_does(
    tmp_path: Path,
    stand_in,  # noqa: F811 - the imported fixture
    vlm_folder: Path,
) -> None:
    from engine.indexing.hashes import content_hash
    from engine.methods.base import ModelManager
    from engine.rerank.base import Photo, Question
    from engine.rerank.scorers import load_scorer

    connected = _downloaded(tmp_path, stand_in, VLM, vlm_folder)
    pack = connected.pack(VLM, tmp_path / "smolvlm.qmodel")
    offline = _offline_store(tmp_path)
    model = offline.import_pack(pack)
    assert model.role == "vlm" and offline.folder(VLM) == model.path

    from PIL import Image

    photo_path = tmp_path / "photo.png"
    Image.new("RGB", (40, 30), (200, 30, 30)).save(photo_path)
    photo = Photo(1, photo_path, content_hash(photo_path))
    answers = []
    for folder in (connected.folder(VLM), model.path):
        context = SimpleNamespace(models=ModelManager())  # what load_scorer reads of a context
        scorer = load_scorer(f"vlm:{folder}", context)  # type: ignore[arg-type]
        answers.append(scorer.score([photo], Question("Is there a red circle?"))[0].p_yes)
    assert answers[0] == pytest.approx(answers[1], abs=1e-6)


def test_the_cli_packs_and_imports_a_vlm_and_says_how_to_use_it(
    tmp_path: Path,
    stand_in,  # noqa: F811 - the imported fixture
    vlm_folder: Path,
    capsys,
    monkeypatch,  # noqa: F811
) -> None:
    from app import paths

    hub = stand_in(_repository_hub(_files(vlm_folder), VLM.removeprefix("hf-hub:")))
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert main(["models", "download", VLM]) == 0
    assert main(["models", "pack", VLM, str(tmp_path)]) == 0
    packs = list(tmp_path.glob("*.qmodel"))
    assert len(packs) == 1
    assert main(["models", "remove", VLM]) == 0
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    capsys.readouterr()
    assert main(["models", "import", str(packs[0])]) == 0
    out = capsys.readouterr().out
    folder = ModelStore(paths.models_dir()).folder(VLM)
    assert folder is not None and f"use it as: vlm:{folder}" in out
    assert main(["models", "list", "--json", "--role", "vlm"]) == 0
    row = {r["spec"]: r for r in json.loads(capsys.readouterr().out)}[VLM]
    assert row["installed"] and row["origin"] == "pack" and row["use"] == f"vlm:{folder}"


def test_a_pack_of_the_downloaded_files_changes_nothing_and_other_files_need_replace(
    tmp_path: Path,
    stand_in,  # noqa: F811 - the imported fixture
    vlm_folder: Path,
) -> None:
    connected = _downloaded(tmp_path, stand_in, VLM, vlm_folder)
    folder = connected.folder(VLM)
    assert folder is not None
    before = (folder / MANIFEST_NAME).read_text()
    same = connected.pack(VLM, tmp_path / "same.qmodel")
    kept = connected.import_pack(same)
    assert kept.origin == "download" and (folder / MANIFEST_NAME).read_text() == before

    other = _role_pack(tmp_path / "other.qmodel", VLM, _vlm_pack_files(vlm_folder, seed=1))
    with pytest.raises(BadInputError, match="already installed with other files") as caught:
        connected.import_pack(other)
    assert "nothing was installed" in str(caught.value) and "--replace" in str(caught.value)
    assert (folder / MANIFEST_NAME).read_text() == before
    replaced = connected.import_pack(other, replace=True)
    assert replaced.origin == "pack" and "[pack sha256-" in replaced.model_key


def test_a_pack_with_a_changed_installed_file_is_refused(
    tmp_path: Path,
    stand_in,  # noqa: F811 - the imported fixture
    vlm_folder: Path,
) -> None:
    connected = _downloaded(tmp_path, stand_in, VLM, vlm_folder)
    folder = connected.folder(VLM)
    assert folder is not None
    with (folder / "config.json").open("a") as handle:
        handle.write(" ")
    with pytest.raises(BadInputError, match=r"has changed since it was installed \(config.json"):
        connected.pack(VLM, tmp_path / "changed.qmodel")
    assert not list(tmp_path.glob("*.qmodel")) and not list(tmp_path.glob(".*.tmp"))


# --- hostile packs of these roles -------------------------------------------------------------


def _vlm_pack_files(vlm_folder: Path, seed: int = 0) -> dict[str, bytes]:
    files = _files(vlm_folder)
    if seed:
        from safetensors.numpy import save

        files["model.safetensors"] = save({"w": np.full((4,), seed, dtype=np.float32)})
    return files


def _role_pack(
    path: Path,
    spec: str,
    files: dict[str, bytes],
    *,
    role: str = "vlm",
    listed: dict[str, bytes] | None = None,
    write=None,
    version: int = 2,
) -> Path:
    """A pack as `quadrat models pack` writes a generator's or VLM's, with parts replaced:
    `listed` is what the manifest lists (default: `files`), `write` writes the entries."""
    manifest = {
        "format": PACK_FORMAT,
        "version": version,
        "role": role,
        "spec": spec,
        "model_key": "",
        "licence": "Apache-2.0",
        "source": spec,
        "commit": "c" * 40,
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for name, data in (listed if listed is not None else files).items()
        },
    }
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(MANIFEST_NAME, json.dumps(manifest))
        if write is not None:
            write(archive, files)
        else:
            for name, data in files.items():
                archive.writestr(name, data)
    return path


def _refused(store: ModelStore, pack: Path, *phrases: str) -> None:
    with pytest.raises(BadInputError) as caught:
        store.import_pack(pack)
    message = str(caught.value)
    assert "\n" not in message and "nothing was installed" in message, message
    for phrase in phrases:
        assert phrase in message, message
    nothing_left(store)


@pytest.mark.parametrize(
    ("name", "phrase"),
    [
        ("../outside.json", "is not a plain relative path"),
        ("sub/../../outside.json", "is not a plain relative path"),
        ("/etc/cron.d/job.json", "is an absolute path"),
        ("sub\\..\\..\\outside.json", "holds a backslash"),
        ("C:/outside.json", "holds a backslash, colon"),
        (".cache/huggingface/x.json", "has a hidden part"),
        ("sub//x.json", "is not a plain relative path"),
        ("nul.json", "names a device on Windows"),
    ],
)
def test_a_path_out_of_the_model_folder_is_refused_before_anything_is_written(
    tmp_path: Path, vlm_folder: Path, name: str, phrase: str
) -> None:
    files = _vlm_pack_files(vlm_folder) | {name: b"{}"}
    store = ModelStore(tmp_path / "store")
    _refused(store, _role_pack(tmp_path / "slip.qmodel", VLM, files), phrase)
    assert not (tmp_path / "outside.json").exists()


def _link(archive: zipfile.ZipFile, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        if name == "tokenizer.json":
            link = zipfile.ZipInfo(name)
            link.create_system = 3
            link.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(link, b"/etc/passwd")
        else:
            archive.writestr(name, data)


def _case_twin(archive: zipfile.ZipFile, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        archive.writestr(name, data)
    archive.writestr("Config.json", files["config.json"])


@pytest.mark.parametrize(
    ("write", "extra", "phrase"),
    [
        (_link, {}, "is a link, not a plain file"),
        (_case_twin, {}, "holds an entry twice"),
        (None, {"modeling_evil.py": b"import os"}, "'modeling_evil.py', which a download"),
        (None, {"pytorch_model.bin": b"pickle"}, "'pytorch_model.bin', which a download"),
        (None, {"onnx/model.json": b"{}"}, "'onnx/model.json', which a download"),
    ],
)
def test_links_twins_code_and_pickles_in_a_vlm_pack_are_refused(
    tmp_path: Path, vlm_folder: Path, write, extra: dict[str, bytes], phrase: str
) -> None:
    files = _vlm_pack_files(vlm_folder) | extra
    listed = {k: v for k, v in files.items() if k != "Config.json"}
    pack = _role_pack(tmp_path / "odd.qmodel", VLM, files, listed=listed, write=write)
    _refused(ModelStore(tmp_path / "store"), pack, phrase)


def test_a_file_and_a_folder_of_one_name_are_refused(tmp_path: Path, vlm_folder: Path) -> None:
    files = _vlm_pack_files(vlm_folder) | {"sub": b"{}", "sub/x.json": b"{}"}
    pack = _role_pack(tmp_path / "clash.qmodel", VLM, files)
    _refused(ModelStore(tmp_path / "store"), pack, "'sub' is both a file and a folder")


def test_an_entry_larger_than_its_manifest_says_stops_there(tmp_path: Path, vlm_folder: Path):
    files = _vlm_pack_files(vlm_folder)
    listed = dict(files)
    files["model.safetensors"] = files["model.safetensors"] + b"\0" * (4 << 20)
    pack = _role_pack(tmp_path / "bomb.qmodel", VLM, files, listed=listed)
    _refused(ModelStore(tmp_path / "store"), pack, "model.safetensors is larger than")


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ({"model.safetensors": b"\x08" + b"\0" * 7 + b"{}garbage"}, "not a valid safetensors"),
        ({"config.json": b'{"no": "model_type"}'}, "has no valid config.json"),
    ],
)
def test_broken_weights_or_config_in_a_vlm_pack_install_nothing(
    tmp_path: Path, vlm_folder: Path, change: dict[str, bytes], phrase: str
) -> None:
    files = _vlm_pack_files(vlm_folder) | change
    pack = _role_pack(tmp_path / "broken.qmodel", VLM, files)
    _refused(ModelStore(tmp_path / "store"), pack, f"claims to be {VLM}", phrase)


def test_a_pack_naming_no_offer_of_its_role_or_an_old_version_is_refused(
    tmp_path: Path, vlm_folder: Path
) -> None:
    files = _vlm_pack_files(vlm_folder)
    store = ModelStore(tmp_path / "store")
    _refused(store, _role_pack(tmp_path / "a.qmodel", "hf-hub:someone/vlm", files), "not among")
    _refused(store, _role_pack(tmp_path / "b.qmodel", VLM, files, role="generator"), "not among")
    _refused(store, _role_pack(tmp_path / "c.qmodel", VLM, files, version=1), "unknown role")
