"""Stable Diffusion through diffusers as real downloads meet it: fp16-only snapshots, turbo models
known by their configs, the cards' defaults and dtypes, single files without a config, no non-EMA
weights, and no blacked-out drawing used as a query. Tiny random pipelines (tests/tiny_sd.py) and a
local stand-in for the hub."""

from __future__ import annotations

import fnmatch
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.models.hub import ModelUnavailableError
from engine.progress import CancelToken, no_progress
from engine.visret import diffusers_backend
from engine.visret.generator import DrawingCache, DrawSettings, draw_all, load_generator

pytestmark = pytest.mark.slow  # (real diffusers pipelines, loaded and run: 7-20 s a test)

FAST = DrawSettings(steps=1, guidance=7.5, width=64, height=64)


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def _fp16_only(tiny_sd_dir: Path, target: Path) -> Path:
    """The tiny pipeline saved as a GPU download leaves it: only ``*.fp16.safetensors``."""
    import torch
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(tiny_sd_dir))
    pipe.to(torch.float16).save_pretrained(str(target), variant="fp16")
    assert not [p for p in target.rglob("*.safetensors") if ".fp16." not in p.name]
    return target


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A stand-in for the hub: repos are local folders; `snapshot_download` copies the files its
    allow patterns name into the cache, and finds them there when asked offline."""
    import huggingface_hub

    repos: dict[str, Path] = {}
    fetched: list[tuple[str, str]] = []

    def list_repo_files(self: object, repo_id: str, **_: object) -> list[str]:
        root = repos[repo_id]
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def snapshot_download(
        repo_id: str,
        *,
        cache_dir: str,
        allow_patterns: list[str] | None = None,
        ignore_patterns: list[str] | None = None,
        local_files_only: bool = False,
        **_: object,
    ) -> str:
        folder = Path(cache_dir) / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "abc"
        if local_files_only:
            if not folder.is_dir():
                raise FileNotFoundError(f"{repo_id} is not in the cache")
            return str(folder)
        for name in list_repo_files(None, repo_id):
            if allow_patterns is not None and not any(
                fnmatch.fnmatch(name, p) for p in allow_patterns
            ):
                continue
            if ignore_patterns and any(fnmatch.fnmatch(name, p) for p in ignore_patterns):
                continue
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(repos[repo_id] / name, folder / name)
            fetched.append((repo_id, name))
        return str(folder)

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", list_repo_files)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr("engine.models.hub.probe", lambda *a, **k: None)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return repos, fetched, tmp_path / "cache"


def test_an_fp16_only_folder_loads_on_the_cpu_in_fp32(tiny_sd_dir, tmp_path):
    import torch

    folder = _fp16_only(tiny_sd_dir, tmp_path / "half")
    generator = load_generator(str(folder), device="cpu")
    assert generator.pipe.unet.dtype == torch.float32  # cast: fp16 maths on a CPU is slow
    image = generator.draw("a red circle", 0, FAST, lambda _: None, CancelToken())
    assert image.size == (64, 64)


def test_a_gpu_download_of_fp16_files_later_loads_on_the_cpu(tiny_sd_dir, tmp_path, hub):
    """A GPU fetches only the fp16 files; the same snapshot then serves a CPU, without a
    second download and without deleting the cache."""
    import torch

    repos, fetched, cache = hub
    repo = _fp16_only(tiny_sd_dir, tmp_path / "repo-half")
    for path in (tiny_sd_dir).rglob("*.safetensors"):  # the repo holds both sets
        target = repo / path.relative_to(tiny_sd_dir)
        shutil.copy(path, target)
    repos["org/tiny-sd"] = repo
    diffusers_backend._hub_folder("org/tiny-sd", cache, no_progress, CancelToken(), fp16=True)
    weights = [name for _, name in fetched if name.endswith(".safetensors")]
    assert weights and all(".fp16." in name for name in weights)
    fetched.clear()
    generator = load_generator("hf-hub:org/tiny-sd", device="cpu", cache_dir=cache)
    assert not fetched
    assert generator.pipe.unet.dtype == torch.float32


def test_sd15_never_downloads_non_ema_weights_or_root_checkpoints(tiny_sd_dir, tmp_path, hub):
    repos, fetched, cache = hub
    repo = _copy(tiny_sd_dir, tmp_path / "sd15")
    unet = repo / "unet"
    shutil.copy(
        unet / "diffusion_pytorch_model.safetensors",
        unet / "diffusion_pytorch_model.non_ema.safetensors",
    )
    shutil.copy(unet / "diffusion_pytorch_model.safetensors", repo / "v1-5-pruned.safetensors")
    repos["org/sd15"] = repo
    generator = load_generator("hf-hub:org/sd15", device="cpu", cache_dir=cache)
    names = [name for _, name in fetched]
    assert "unet/diffusion_pytorch_model.safetensors" in names
    assert not [n for n in names if "non_ema" in n or "/" not in n and n.endswith("safetensors")]
    assert "StableDiffusionPipeline" in generator.label


def _trailing(folder: Path) -> None:
    """sd-turbo's scheduler: Euler with trailing timesteps (what a one-step model samples)."""
    config = folder / "scheduler" / "scheduler_config.json"
    data = json.loads(config.read_text())
    data.update({"_class_name": "EulerDiscreteScheduler", "timestep_spacing": "trailing"})
    config.write_text(json.dumps(data))


@pytest.mark.parametrize("where", ["hub-cache", "copied"])
def test_sd_turbo_from_a_snapshot_folder_draws_in_one_step_without_guidance(
    tiny_sd_dir, tmp_path, where
):
    if where == "hub-cache":  # the repo id is in the path; the folder name is a commit hash
        folder = tmp_path / "hub" / "models--stabilityai--sd-turbo" / "snapshots" / "0a1b2c3d"
        _copy(tiny_sd_dir, folder)
    else:  # the snapshot copied elsewhere: only its scheduler config tells
        folder = _copy(tiny_sd_dir, tmp_path / "models" / "0a1b2c3d")
        _trailing(folder)
    settings = load_generator(str(folder), device="cpu").default_settings()
    assert (settings.steps, settings.guidance) == (1, 0.0)


def _configs(folder: Path, pipeline: str, **components: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
    for name, config in components.items():
        (folder / name).mkdir()
        file = "scheduler_config.json" if name == "scheduler" else "config.json"
        (folder / name / file).write_text(json.dumps(config))
    return folder


def test_the_cards_defaults_and_dtypes_come_from_the_model_s_configs(tmp_path):
    from engine.visret.diffusers_backend import read_family

    flow = {"_class_name": "FlowMatchEulerDiscreteScheduler"}
    schnell = _configs(
        tmp_path / "a",
        "FluxPipeline",
        scheduler=flow,
        transformer={"guidance_embeds": False},
    )
    dev = _configs(
        tmp_path / "b", "FluxPipeline", scheduler=flow, transformer={"guidance_embeds": True}
    )
    turbo = _configs(
        tmp_path
        / "hub"
        / "models--stabilityai--stable-diffusion-3.5-large-turbo"
        / "snapshots"
        / "c0ffee",
        "StableDiffusion3Pipeline",
        scheduler=flow,
        transformer={"qk_norm": "rms_norm"},
    )
    sd3 = _configs(tmp_path / "d", "StableDiffusion3Pipeline", transformer={"qk_norm": None})
    sd15 = _configs(tmp_path / "e", "StableDiffusionPipeline", scheduler={"_class_name": "PNDM"})
    assert (read_family(schnell).steps, read_family(schnell).guidance) == (4, 0.0)
    assert (read_family(dev).steps, read_family(dev).guidance) == (28, 3.5)
    assert (read_family(turbo).steps, read_family(turbo).guidance) == (4, 0.0)
    assert (read_family(sd15).steps, read_family(sd15).guidance) == (25, 7.5)
    # bf16 where the model is published in it and the GPU supports it; fp32 on a CPU
    for folder in (schnell, dev, turbo):
        assert read_family(folder).dtype("cuda", bf16=True) == "bfloat16"
        assert read_family(folder).dtype("cuda", bf16=False) == "float16"
        assert read_family(folder).dtype("cpu", bf16=True) == "float32"
    assert read_family(sd15).dtype("cuda", bf16=True) == "float16"
    assert read_family(sd3).dtype("cuda", bf16=True) == "float16"


def test_a_single_file_without_config_looks_its_config_up_online(tiny_sd_dir, tmp_path, hub):
    from tests.tiny_sd import write_single_file

    repos, fetched, cache = hub
    checkpoint = write_single_file(tiny_sd_dir, tmp_path / "tiny.safetensors")
    from diffusers.loaders import single_file_utils

    state = single_file_utils.load_single_file_checkpoint(str(checkpoint))
    repo_id = single_file_utils.fetch_diffusers_config(state)["pretrained_model_name_or_path"]
    repos[repo_id] = tiny_sd_dir
    single = load_generator(str(checkpoint), device="cpu", cache_dir=cache)
    assert fetched and all(r == repo_id for r, _ in fetched)
    assert not [n for _, n in fetched if n.endswith(".safetensors")]  # configs only
    folder = load_generator(str(tiny_sd_dir), device="cpu")
    one = single.draw("a blue square", 1, FAST, lambda _: None, CancelToken())
    two = folder.draw("a blue square", 1, FAST, lambda _: None, CancelToken())
    assert np.array_equal(np.asarray(one), np.asarray(two))


def test_a_single_file_without_config_offline_says_what_to_add(tiny_sd_dir, tmp_path, monkeypatch):
    from tests.tiny_sd import write_single_file

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    checkpoint = write_single_file(tiny_sd_dir, tmp_path / "tiny.safetensors")
    with pytest.raises(ModelUnavailableError) as caught:
        load_generator(str(checkpoint), device="cpu", cache_dir=tmp_path / "cache")
    message = str(caught.value)
    assert "?config=" in message and "tiny.safetensors" in message and "\n" not in message


def test_a_blacked_out_drawing_is_never_used_as_a_query_image(tiny_sd_dir, tmp_path):
    """The safety checker stays on; what it flags is dropped with a note, never cached."""
    generator = load_generator(str(tiny_sd_dir), device="cpu")
    pipe = generator.pipe

    def flag_everything(image, device, dtype):  # what the checker does to a false positive
        return image * 0, [True] * len(image)

    pipe.run_safety_checker = flag_everything
    cache = DrawingCache(tmp_path / "drawings")
    drawings = draw_all(generator, "a bare tree", [0], FAST, cache=cache)
    assert [d.image for d in drawings] == [None]
    assert all("safety checker" in d.error for d in drawings)
    assert not list((tmp_path / "drawings").rglob("*.png"))
