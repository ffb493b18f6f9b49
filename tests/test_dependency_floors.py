"""Dependency floors enforced where the models load: an older transformers (before 4.56 the
`dtype=` argument is ignored and a VLM loads in fp32 at twice the memory) or open_clip (before
3.0 there is no `local-dir:`, which every store model loads through) is refused in one line
naming the installed version, the floor and the fix; pyproject.toml states the same floors."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from engine.errors import ModelLoadError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_vlm_folder(tmp_path_factory) -> Path:
    from tests.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("floor-vlm") / "model")


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory) -> Path:
    """An open_clip model folder (config and safetensors weights) of a tiny architecture."""
    import open_clip
    import torch
    from safetensors.torch import save_file

    from tests.test_encoders import TINY_ARCH, TINY_CONFIG

    folder = tmp_path_factory.mktemp("floor-clip")
    arch_file = folder / f"{TINY_ARCH}.json"
    arch_file.write_text(json.dumps(TINY_CONFIG))
    open_clip.add_model_config(arch_file)
    torch.manual_seed(3)
    model = open_clip.create_model(TINY_ARCH).eval()
    model_dir = folder / "model"
    model_dir.mkdir()
    (model_dir / "open_clip_config.json").write_text(
        json.dumps({"model_cfg": TINY_CONFIG, "preprocess_cfg": {}})
    )
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()},
        str(model_dir / "open_clip_model.safetensors"),
    )
    return model_dir


def _one_line_fix(message: str, installed: str, floor: str, package: str) -> None:
    assert "\n" not in message
    assert installed in message and floor in message
    assert f"pip install -U '{package}>={floor}'" in message


def test_an_old_transformers_is_refused_before_a_vlm_loads_in_fp32(
    tiny_vlm_folder: Path, monkeypatch
) -> None:
    import transformers

    from engine.rerank.vlm import VlmScorer

    monkeypatch.setattr(transformers, "__version__", "4.55.2")
    with pytest.raises(ModelLoadError) as raised:
        VlmScorer(tiny_vlm_folder, device="cpu")
    _one_line_fix(str(raised.value), "4.55.2", "4.56", "transformers")


def test_the_floor_version_itself_loads_the_vlm(tiny_vlm_folder: Path, monkeypatch) -> None:
    import transformers

    from engine.rerank.vlm import VlmScorer

    monkeypatch.setattr(transformers, "__version__", "4.56.0")
    assert VlmScorer(tiny_vlm_folder, device="cpu").dtype == "float32"


def test_an_old_open_clip_is_refused_before_a_store_model_loads(
    clip_folder: Path, monkeypatch
) -> None:
    import open_clip

    from engine.models.encoders import load_encoder

    monkeypatch.setattr(open_clip, "__version__", "2.32.0")
    with pytest.raises(ModelLoadError) as raised:
        load_encoder(f"local-dir:{clip_folder}", device="cpu")
    _one_line_fix(str(raised.value), "2.32.0", "3.0", "open_clip_torch")
    monkeypatch.setattr(open_clip, "__version__", "3.0.0")
    assert load_encoder(f"local-dir:{clip_folder}", device="cpu").dim == 32


def test_pyproject_states_the_floors_the_loaders_check() -> None:
    from engine.models.floors import FLOORS

    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    stated = {}
    for requirement in dependencies:
        name, _, floor = requirement.partition(">=")
        if name.strip() in FLOORS:
            stated[name.strip()] = floor.split(",")[0].strip()
    assert stated == FLOORS
