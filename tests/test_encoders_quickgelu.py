"""open_clip models built as their weights were trained: the activation (QuickGELU or GELU) and
the image preprocessing (mean/std, resize mode) come from the pretrained tag's registry entry or
the model's own config, on every loading path (ARCH:TAG downloaded or from the store,
ARCH:/file, local-dir:), and a model key changes only where what is built changes.

No network: a tiny ViT config is registered by the test, its pretrained tags are put into
open_clip's registry with monkeypatch, and the weights lie where the loader looks for them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from engine.files import file_sha256
from engine.models.encoders import OpenClipEncoder, load_encoder
from engine.models.folders import CONFIG_NAME, MANIFEST_NAME, WEIGHTS_NAME, folder_slug
from engine.models.spec import DEMO_ARCH, demo_weights_path

ARCH = "quadrat-test-qg-vit"  # a GELU architecture, like ViT-B-32
CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 8},
    "text_cfg": {"context_length": 12, "vocab_size": 49408, "width": 16, "heads": 2, "layers": 1},
}
HALF = [0.5, 0.5, 0.5]
OPENAI_MEAN = [0.48145466, 0.4578275, 0.40821073]


def _tag(url: str = "", **options: object) -> dict[str, object]:
    """A registry entry as open_clip writes them (OpenAI mean/std, bicubic, shortest side)."""
    return {
        "url": url,
        "hf_hub": "",
        "mean": tuple(OPENAI_MEAN),
        "std": (0.26862954, 0.26130258, 0.27577711),
        "interpolation": "bicubic",
        "resize_mode": "shortest",
        **options,
    }


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny architecture registered with open_clip and a random state dict (safetensors)."""
    import open_clip
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("qg-model")
    config = folder / f"{ARCH}.json"
    config.write_text(json.dumps(CONFIG))
    open_clip.add_model_config(config)
    torch.manual_seed(3)
    model = open_clip.create_model(ARCH).eval()
    path = folder / "weights.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def uses_quick_gelu(encoder: OpenClipEncoder) -> bool:
    from open_clip.transformer import QuickGELU

    return any(isinstance(module, QuickGELU) for module in encoder.model.modules())


def normalise_mean(encoder: OpenClipEncoder) -> list[float]:
    return [round(float(v), 6) for v in encoder._transform.transforms[-1].mean]


def keeps_the_left_edge(encoder: OpenClipEncoder) -> bool:
    """Whether a 4:1 photo with a red left quarter still shows red after preprocessing: squashed
    it does, centre-cropped (open_clip's default, "shortest") it does not."""
    pixels = np.zeros((32, 128, 3), dtype=np.uint8)
    pixels[:, :32] = (255, 0, 0)
    pixels[:, 32:] = (0, 0, 255)
    seen = np.asarray(encoder.preprocess(Image.fromarray(pixels)))
    if seen.shape[0] == 3:  # a tensor, channels first
        seen = np.moveaxis(seen, 0, -1)
    return bool(seen[:, 0, 0].mean() > seen[:, 0, 2].mean())


def folder_config(quick_gelu: bool, **preprocess: object) -> dict[str, object]:
    return {"model_cfg": {**CONFIG, "quick_gelu": quick_gelu}, "preprocess_cfg": preprocess}


def test_a_tag_trained_with_quick_gelu_builds_quick_gelu_and_says_so_in_its_key(
    tmp_path, weights, monkeypatch
) -> None:
    """ARCH:TAG, downloaded: like ViT-B-32:openai, whose weights were trained with QuickGELU on
    a GELU architecture (open_clip only warns and builds GELU)."""
    from open_clip import pretrained
    from safetensors.torch import load_file

    cache = tmp_path / "cache"
    cache.mkdir()
    state = load_file(str(weights))
    torch.save(state, cache / "qg-weights.pt")
    torch.save(state, cache / "plain-weights.pt")
    tags = {
        "qgtag": _tag("https://example.invalid/qg-weights.pt", quick_gelu=True),
        "plain": _tag("https://example.invalid/plain-weights.pt", mean=(0.5,) * 3, std=(0.5,) * 3),
    }
    monkeypatch.setitem(pretrained._PRETRAINED, ARCH, tags)

    quick = load_encoder(f"{ARCH}:qgtag", device="cpu", cache_dir=cache)
    assert uses_quick_gelu(quick)
    # vectors of the GELU build an older version made are not these: the key differs, so a
    # library indexed then is told to re-index instead of mixing the two
    assert quick.model_key == f"{ARCH}:qgtag [quickgelu]"

    plain = load_encoder(f"{ARCH}:plain", device="cpu", cache_dir=cache)
    assert not uses_quick_gelu(plain)
    assert plain.model_key == f"{ARCH}:plain"  # nothing changed: the same key as before
    assert normalise_mean(plain) == HALF


def test_a_tag_from_the_store_builds_as_the_download_does(tmp_path, weights, monkeypatch) -> None:
    """ARCH:TAG installed in the store: its folder's config is the architecture's model_cfg (no
    quick_gelu) with the tag's preprocessing; the tag's flag still decides the activation."""
    from open_clip import pretrained

    tags = {"qgtag": _tag("https://example.invalid/qg.pt", quick_gelu=True, resize_mode="squash")}
    monkeypatch.setitem(pretrained._PRETRAINED, ARCH, tags)
    spec = f"{ARCH}:qgtag"
    store = tmp_path / "store"
    folder = store / folder_slug(spec)
    folder.mkdir(parents=True)
    (folder / WEIGHTS_NAME).write_bytes(weights.read_bytes())
    (folder / CONFIG_NAME).write_text(
        json.dumps({"model_cfg": CONFIG, "preprocess_cfg": {"resize_mode": "squash"}})
    )
    (folder / MANIFEST_NAME).write_text(json.dumps({"spec": spec, "origin": "download"}))

    encoder = load_encoder(spec, device="cpu", cache_dir=tmp_path / "none", store_dir=store)
    assert uses_quick_gelu(encoder)
    assert encoder.model_key == f"{spec} [quickgelu]"
    assert keeps_the_left_edge(encoder)


def test_a_checkpoint_file_with_a_config_beside_it_builds_what_the_config_says(
    tmp_path, weights
) -> None:
    """ARCH:/file in a folder with open_clip_config.json (a hub snapshot, a DFN-378 download):
    QuickGELU, squash and mean/std 0.5 from that config, not open_clip's defaults."""
    folder = tmp_path / "dfn"
    folder.mkdir()
    checkpoint = folder / "open_clip_model.safetensors"
    checkpoint.write_bytes(weights.read_bytes())
    config = folder_config(True, mean=HALF, std=HALF, resize_mode="squash")
    (folder / CONFIG_NAME).write_text(json.dumps(config))

    encoder = load_encoder(f"{ARCH}:{checkpoint}", device="cpu")
    assert normalise_mean(encoder) == HALF
    assert keeps_the_left_edge(encoder)
    assert uses_quick_gelu(encoder)
    digest = file_sha256(checkpoint)[:16]
    assert encoder.model_key.startswith(f"{ARCH}:sha256-{digest} [")
    assert "quickgelu" in encoder.model_key


def test_a_bare_checkpoint_takes_the_architectures_registered_config_when_unambiguous(
    tmp_path, weights, monkeypatch
) -> None:
    """ARCH:/file with no config beside it: the architecture's pretrained entries decide what
    they agree on; what they disagree on stays open_clip's default."""
    from open_clip import pretrained

    checkpoint = tmp_path / "weights.safetensors"
    checkpoint.write_bytes(weights.read_bytes())
    spec = f"{ARCH}:{checkpoint}"

    one = {"only": _tag(quick_gelu=True, mean=(0.5,) * 3, std=(0.5,) * 3, resize_mode="squash")}
    monkeypatch.setitem(pretrained._PRETRAINED, ARCH, one)
    encoder = load_encoder(spec, device="cpu")
    assert uses_quick_gelu(encoder)
    assert normalise_mean(encoder) == HALF
    assert keeps_the_left_edge(encoder)

    # two tags disagreeing on mean/std and activation (like ViT-L-14's openai and laion2b)
    two = {"a": _tag(quick_gelu=True), "b": _tag(mean=(0.5,) * 3, std=(0.5,) * 3)}
    monkeypatch.setitem(pretrained._PRETRAINED, ARCH, two)
    ambiguous = load_encoder(spec, device="cpu")
    assert not uses_quick_gelu(ambiguous)
    assert normalise_mean(ambiguous) == pytest.approx(OPENAI_MEAN, abs=1e-6)
    assert ambiguous.model_key == f"{ARCH}:sha256-{file_sha256(checkpoint)[:16]}"


def test_a_checkpoint_trained_at_another_size_is_seen_at_that_size(tmp_path, weights) -> None:
    """A fine-tune at a higher resolution (like DFN's 378 pixels) is built and fed at the size
    its config gives, not the architecture's."""
    checkpoint = tmp_path / "weights.safetensors"
    checkpoint.write_bytes(weights.read_bytes())
    config = folder_config(False)
    config["model_cfg"] = {**CONFIG, "vision_cfg": {**CONFIG["vision_cfg"], "image_size": 64}}
    (tmp_path / CONFIG_NAME).write_text(json.dumps(config))

    encoder = load_encoder(f"{ARCH}:{checkpoint}", device="cpu")
    assert encoder.image_size == 64
    assert np.asarray(encoder.preprocess(Image.new("RGB", (200, 100)))).shape[:2] == (64, 64)
    assert encoder.model_key.endswith(" [image 64]")


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ("{not json", "is not a valid open_clip config"),
        (json.dumps(folder_config(False, resize_mode="stretch")), "resize_mode 'stretch'"),
        (json.dumps(folder_config(False, mean=[0.5, "x", 0.5])), "three numbers"),
    ],
    ids=["not-json", "unknown-resize-mode", "mean-not-numbers"],
)
def test_a_broken_config_beside_a_checkpoint_is_one_line(tmp_path, weights, config, said) -> None:
    from engine.errors import ModelLoadError

    checkpoint = tmp_path / "weights.safetensors"
    checkpoint.write_bytes(weights.read_bytes())
    (tmp_path / CONFIG_NAME).write_text(config)
    with pytest.raises(ModelLoadError) as error:
        load_encoder(f"{ARCH}:{checkpoint}", device="cpu")
    message = str(error.value)
    assert said in message and str(tmp_path / CONFIG_NAME) in message
    assert "\n" not in message
    assert checkpoint.read_bytes() == weights.read_bytes()  # nothing touched


def test_a_local_dir_builds_its_configs_activation_and_preprocessing(tmp_path, weights) -> None:
    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / WEIGHTS_NAME).write_bytes(weights.read_bytes())
    config = folder_config(True, mean=HALF, std=HALF, resize_mode="squash")
    (folder / CONFIG_NAME).write_text(json.dumps(config))

    encoder = load_encoder(f"local-dir:{folder}", device="cpu")
    assert uses_quick_gelu(encoder)
    assert normalise_mean(encoder) == HALF
    assert keeps_the_left_edge(encoder)
    assert encoder.model_key == f"local-dir:sha256-{file_sha256(folder / WEIGHTS_NAME)[:16]}"


def test_the_demo_models_key_is_unchanged(demo_encoder) -> None:
    """Nothing about the demo model's build changed: existing demo libraries keep their key."""
    assert demo_encoder.model_key == f"{DEMO_ARCH}:sha256-{file_sha256(demo_weights_path())[:16]}"
