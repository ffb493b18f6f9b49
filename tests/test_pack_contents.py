"""Version 2 packs (an image generator's or a VLM's folder of files) holding code, pickles or
links, wherever they sit in the folder and whatever they are named: each is refused in one
line, nothing is installed, and nothing in them runs (a module that would leave a mark when
imported, a pickle that would leave one when unpickled, leave none)."""

from __future__ import annotations

import pickle
import stat
import zipfile
from pathlib import Path

import pytest

from engine.models.store import ModelStore
from tests.test_packs_roles import (  # noqa: F401 - the fixtures
    GENERATOR,
    VLM,
    _files,
    _refused,
    _role_pack,
    generator_folder,
    vlm_folder,
)


class _Mark:
    """Unpickled, it would create the file at `path` (`os.system` is what a real one runs)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.touch, (self.path,))


def _code(mark: Path) -> bytes:
    return f"import pathlib\npathlib.Path({str(mark)!r}).touch()\n".encode()


def _pickle(mark: Path) -> bytes:
    return pickle.dumps({"state_dict": _Mark(mark)})


def _link_writer(name: str, target: str):  # type: ignore[no-untyped-def]
    def write(archive: zipfile.ZipFile, files: dict[str, bytes]) -> None:
        for entry, data in files.items():
            if entry == name:
                link = zipfile.ZipInfo(entry)
                link.create_system = 3  # unix, so the mode below is read
                link.external_attr = (stat.S_IFLNK | 0o777) << 16
                archive.writestr(link, target.encode())
            else:
                archive.writestr(entry, data)

    return write


# (what, the entry's name per role, its bytes, the words of the refusal)
CASES = [
    ("code at the top", {"vlm": "modeling_evil.py", "generator": "pipeline_evil.py"}, "code",
     "which a download"),
    ("code in a component", {"vlm": "processor/evil.py", "generator": "unet/unet_evil.py"},
     "code", "which a download"),
    ("compiled code", {"vlm": "__pycache__/x.cpython-311.pyc",
                       "generator": "scheduler/__pycache__/x.cpython-311.pyc"}, "code",
     "which a download"),
    ("a pickle as .bin", {"vlm": "pytorch_model.bin",
                          "generator": "unet/diffusion_pytorch_model.bin"}, "pickle",
     "which a download"),
    ("a pickle as .pt", {"vlm": "training_args.pt", "generator": "vae/vae.pt"}, "pickle",
     "which a download"),
    ("a pickle as .pkl", {"vlm": "state.pkl", "generator": "text_encoder/state.pkl"}, "pickle",
     "which a download"),
    ("a pickle as .ckpt", {"vlm": "model.ckpt", "generator": "unet/model.ckpt"}, "pickle",
     "which a download"),
    ("a pickle named as weights", {"vlm": "model.safetensors",
                                   "generator": "unet/diffusion_pytorch_model.fp16.safetensors"},
     "pickle", "not a valid safetensors file"),
]  # fmt: skip


def _pack_files(role: str, vlm: Path, generator: Path) -> dict[str, bytes]:
    return _files(vlm if role == "vlm" else generator)


@pytest.mark.parametrize("role", ["vlm", "generator"])
@pytest.mark.parametrize(("what", "names", "kind", "phrase"), CASES, ids=[c[0] for c in CASES])
def test_code_and_pickles_in_a_pack_are_refused_and_never_run(
    role: str,
    what: str,
    names: dict[str, str],
    kind: str,
    phrase: str,
    tmp_path: Path,
    vlm_folder: Path,  # noqa: F811
    generator_folder: Path,  # noqa: F811
) -> None:
    mark = tmp_path / "ran"
    name = names[role]
    files = _pack_files(role, vlm_folder, generator_folder)
    files[name] = _code(mark) if kind == "code" else _pickle(mark)
    spec = VLM if role == "vlm" else GENERATOR
    pack = _role_pack(tmp_path / "odd.qmodel", spec, files, role=role)
    _refused(ModelStore(tmp_path / "store"), pack, phrase, name if "weights" not in what else "")
    assert not mark.exists(), "something in the pack ran"


@pytest.mark.parametrize("role", ["vlm", "generator"])
@pytest.mark.parametrize(
    ("where", "target"),
    [("the config", "/etc/passwd"), ("the weights", "../../../outside"),
     ("a nested file", "/root/.ssh/id_rsa")],
)  # fmt: skip
def test_a_link_anywhere_in_a_pack_is_refused(
    role: str,
    where: str,
    target: str,
    tmp_path: Path,
    vlm_folder: Path,  # noqa: F811
    generator_folder: Path,  # noqa: F811
) -> None:
    files = _pack_files(role, vlm_folder, generator_folder)
    config = "config.json" if role == "vlm" else "model_index.json"
    weights = next(n for n in sorted(files) if n.endswith(".safetensors"))
    if where == "the config":
        name = config
    elif where == "the weights":
        name = weights
    else:  # a tokenizer's or a component's file
        name = next(n for n in sorted(files, key=lambda n: -n.count("/"))
                    if n not in (config, weights))  # fmt: skip
    spec = VLM if role == "vlm" else GENERATOR
    pack = _role_pack(tmp_path / "link.qmodel", spec, files, role=role,
                      write=_link_writer(name, target))  # fmt: skip
    _refused(ModelStore(tmp_path / "store"), pack, "is a link, not a plain file")
    assert not (tmp_path / "outside").exists()
