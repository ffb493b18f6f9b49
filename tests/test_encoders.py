"""Model specs, device choice, safe loading of local weights and the open_clip encoder."""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from engine.errors import BadInputError, ModelLoadError
from engine.models.encoders import (
    ModelSpec,
    choose_device,
    demo_model_spec,
    load_encoder,
    parse_model_spec,
    read_weights,
)

TINY_ARCH = "quadrat-test-tiny-vit"
TINY_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 8},
    "text_cfg": {"context_length": 12, "vocab_size": 49408, "width": 16, "heads": 2, "layers": 1},
}


# --- specs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("demo", ModelSpec("demo", "demo", arch="quadrat-demo")),
        (
            "ViT-B-32:laion2b_s34b_b79k",
            ModelSpec("ViT-B-32:laion2b_s34b_b79k", "pretrained", "ViT-B-32", "laion2b_s34b_b79k"),
        ),
        (
            "hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
            ModelSpec(
                "hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
                "hf-hub",
                hub_id="laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
            ),
        ),
        (
            "ViT-B-16:/models/clip/weights.bin",
            ModelSpec(
                "ViT-B-16:/models/clip/weights.bin",
                "checkpoint",
                "ViT-B-16",
                path=Path("/models/clip/weights.bin"),
            ),
        ),
        (
            "RN50:weights.pt",
            ModelSpec("RN50:weights.pt", "checkpoint", "RN50", path=Path("weights.pt")),
        ),
        (
            "local-dir:/models/my-clip",
            ModelSpec("local-dir:/models/my-clip", "local-dir", path=Path("/models/my-clip")),
        ),
    ],
)
def test_parse_model_spec_accepts_every_documented_form(spec: str, expected: ModelSpec) -> None:
    assert parse_model_spec(spec) == expected


def test_an_existing_file_without_a_separator_or_suffix_is_a_checkpoint(
    tmp_path, monkeypatch
) -> None:
    (tmp_path / "mymodel").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert parse_model_spec("RN50:mymodel").kind == "checkpoint"
    assert parse_model_spec("RN50:openai").kind == "pretrained"


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "   ",
        "ViT-B-32",
        "hf-hub:",
        "hf-hub:no-org",
        ":openai",
        "ViT-B-32:",
        "local-dir:",
        "RN50:bad tag!",
    ],
)
def test_malformed_specs_say_which_forms_are_accepted(spec: str) -> None:
    with pytest.raises(BadInputError) as caught:
        parse_model_spec(spec)
    message = str(caught.value)
    assert "\n" not in message
    assert "ARCH:PRETRAINED" in message and "hf-hub:ORG/NAME" in message and "demo" in message


def test_choose_device() -> None:
    assert choose_device("cpu") == "cpu"
    assert choose_device("auto") in {"cpu", "cuda", "mps"}
    with pytest.raises(
        BadInputError, match="device 'tpu' is not available here; available: auto, cpu"
    ):
        choose_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(BadInputError, match="'cuda' is not available"):
            choose_device("cuda")


# --- the demo model and local checkpoints ----------------------------------------------------


@pytest.fixture(scope="module")
def demo_encoder():
    return load_encoder("demo", device="cpu")


@pytest.fixture(scope="module")
def tiny_model_files(tmp_path_factory):
    """A randomly initialised model of a custom config, saved as safetensors and as .pt."""
    import open_clip
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("tiny")
    config = folder / f"{TINY_ARCH}.json"
    config.write_text(json.dumps(TINY_CONFIG))
    open_clip.add_model_config(config)
    torch.manual_seed(1)
    model = open_clip.create_model(TINY_ARCH).eval()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "tiny.safetensors"))
    torch.save(state, folder / "tiny.pt")
    return model, folder


def _photos() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (48, 70, 3), dtype=np.uint8)) for _ in range(3)]


def test_demo_embeddings_are_unit_vectors_of_the_model_dimension(demo_encoder) -> None:
    images = demo_encoder.encode_images(_photos())
    texts = demo_encoder.encode_texts(["red circle", "a blue triangle"])
    assert demo_encoder.dim == 64
    assert images.shape == (3, 64) and texts.shape == (2, 64)
    assert images.dtype == np.float32 and texts.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(images, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(texts, axis=1), 1.0, atol=1e-5)
    assert demo_encoder.encode_texts([]).shape == (0, 64)
    assert demo_encoder.encode_preprocessed([]).shape == (0, 64)


def test_encode_preprocessed_matches_encode_images(demo_encoder) -> None:
    photos = _photos()
    batch = [demo_encoder.preprocess(p) for p in photos]
    np.testing.assert_array_equal(
        demo_encoder.encode_preprocessed(batch), demo_encoder.encode_images(photos)
    )


def test_a_very_long_text_is_truncated_not_an_error(demo_encoder) -> None:
    long_text = ("a red circle on a grey background " * 200)[:5000]
    vector = demo_encoder.encode_texts([long_text])
    assert vector.shape == (1, 64)
    assert np.isfinite(vector).all()


def test_demo_loads_like_a_local_checkpoint_of_the_same_file(demo_encoder, tmp_path) -> None:
    arch, _, path = demo_model_spec().partition(":")
    copy = tmp_path / "elsewhere" / "copied.safetensors"
    copy.parent.mkdir()
    shutil.copy(path, copy)
    copied = load_encoder(f"{arch}:{copy}", device="cpu")
    photos = _photos()
    np.testing.assert_array_equal(copied.encode_images(photos), demo_encoder.encode_images(photos))
    np.testing.assert_array_equal(
        copied.encode_texts(["green square"]), demo_encoder.encode_texts(["green square"])
    )
    # A moved but identical file keeps its identity; the identity names the architecture.
    assert copied.model_key == demo_encoder.model_key
    assert demo_encoder.model_key.startswith("quadrat-demo:sha256-")


def test_a_changed_checkpoint_gets_another_model_key(demo_encoder, tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    _, _, path = demo_model_spec().partition(":")
    state = load_file(path)
    state["logit_scale"] = state["logit_scale"] + 1
    changed = tmp_path / "changed.safetensors"
    save_file(state, str(changed))
    assert load_encoder(f"quadrat-demo:{changed}", device="cpu").model_key != demo_encoder.model_key


@pytest.mark.parametrize("file_name", ["tiny.safetensors", "tiny.pt"])
def test_custom_checkpoints_load_bit_identically(tiny_model_files, file_name: str) -> None:
    model, folder = tiny_model_files
    encoder = load_encoder(f"{TINY_ARCH}:{folder / file_name}", device="cpu")
    loaded = encoder.model.state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded[name], tensor), name
    with torch.inference_mode():
        expected = torch.nn.functional.normalize(
            model.encode_text(encoder._tokenizer(["a fern"])), dim=-1
        )
    np.testing.assert_array_equal(encoder.encode_texts(["a fern"]), expected.numpy())
    assert encoder.dim == 32


def test_local_dir_model_loads(tiny_model_files, tmp_path) -> None:
    model, folder = tiny_model_files
    model_dir = tmp_path / "my-clip"
    model_dir.mkdir()
    shutil.copy(folder / "tiny.safetensors", model_dir / "open_clip_model.safetensors")
    (model_dir / "open_clip_config.json").write_text(
        json.dumps({"model_cfg": TINY_CONFIG, "preprocess_cfg": {}})
    )
    encoder = load_encoder(f"local-dir:{model_dir}", device="cpu")
    from_file = load_encoder(f"{TINY_ARCH}:{folder / 'tiny.safetensors'}", device="cpu")
    np.testing.assert_array_equal(encoder.encode_texts(["moss"]), from_file.encode_texts(["moss"]))
    assert encoder.model_key.startswith("local-dir:sha256-")


def test_weights_of_another_architecture_are_refused(tiny_model_files) -> None:
    _, folder = tiny_model_files
    with pytest.raises(
        ModelLoadError, match=r"tiny\.safetensors do not fit the quadrat-demo architecture"
    ):
        load_encoder(f"quadrat-demo:{folder / 'tiny.safetensors'}", device="cpu")


# --- unsafe and broken files -----------------------------------------------------------------


class _Payload:
    """Unpickling this would create a file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path) -> None:
    marker = tmp_path / "code-ran"
    evil = tmp_path / "evil.pt"
    torch.save({"visual.conv1.weight": torch.zeros(1), "hook": _Payload(marker)}, evil)
    with pytest.raises(ModelLoadError) as caught:
        load_encoder(f"quadrat-demo:{evil}", device="cpu")
    assert str(caught.value) == (
        f"refusing to load {evil}: it is not a plain weights file (it contains code: io.open)"
    )
    assert not marker.exists()


def test_a_raw_pickle_is_refused_without_running(tmp_path) -> None:
    marker = tmp_path / "code-ran"
    evil = tmp_path / "evil.pth"
    evil.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(ModelLoadError, match="evil.pth"):
        load_encoder(f"quadrat-demo:{evil}", device="cpu")
    assert not marker.exists()


def _truncated_safetensors() -> bytes:
    from safetensors.torch import save

    data = save({"w": torch.ones(64, 64)})
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    ("file_name", "content"),
    [
        ("notes.safetensors", b"these are my field notes, not a model\n"),
        ("notes.pt", b"these are my field notes, not a model\n"),
        ("noise.safetensors", np.random.default_rng(1).bytes(4096)),
        ("noise.pt", np.random.default_rng(2).bytes(4096)),
        ("cut.safetensors", _truncated_safetensors()),
        ("cut.pt", _truncated_safetensors()),
        ("empty.pt", b""),
    ],
)
def test_files_that_are_not_checkpoints_give_an_error_naming_the_file(
    tmp_path, file_name, content
) -> None:
    path = tmp_path / file_name
    path.write_bytes(content)
    with pytest.raises(ModelLoadError) as caught:
        load_encoder(f"quadrat-demo:{path}", device="cpu")
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_pt_file_holding_something_else_than_weights_is_refused(tmp_path) -> None:
    path = tmp_path / "list.pt"
    buffer = io.BytesIO()
    torch.save([1, 2, 3], buffer)
    path.write_bytes(buffer.getvalue())
    with pytest.raises(ModelLoadError, match="list.pt does not hold model weights"):
        load_encoder(f"quadrat-demo:{path}", device="cpu")


def test_torchscript_archives_are_refused_even_plain_ones(tmp_path) -> None:
    # Loading any TorchScript archive runs code it carries (tests/test_model_safety.py).
    path = tmp_path / "scripted.pt"
    torch.jit.script(torch.nn.Linear(2, 3)).save(str(path))
    with pytest.raises(ModelLoadError, match="TorchScript archive, which runs code"):
        read_weights(path)


def test_a_missing_checkpoint_file(tmp_path) -> None:
    missing = tmp_path / "nowhere.safetensors"
    with pytest.raises(ModelLoadError, match=f"model file not found: {missing}"):
        load_encoder(f"quadrat-demo:{missing}", device="cpu")


# --- named models: errors without a model hub --------------------------------------------------


def test_an_unknown_architecture_lists_known_names(tmp_path) -> None:
    with pytest.raises(
        ModelLoadError,
        match=r"unknown model architecture 'ViT-Q-99'; known ones include .*ViT-B-32",
    ):
        load_encoder("ViT-Q-99:laion2b_s34b_b79k", device="cpu", cache_dir=tmp_path)
    with pytest.raises(ModelLoadError, match="unknown model architecture"):
        load_encoder(f"ViT-Q-99:{tmp_path / 'w.safetensors'}", device="cpu")


def test_an_unknown_pretrained_tag_lists_the_tags_of_the_architecture(tmp_path) -> None:
    with pytest.raises(
        ModelLoadError,
        match=r"unknown pretrained tag 'nonsense' for ViT-B-32; known tags: .*laion2b_s34b_b79k",
    ):
        load_encoder("ViT-B-32:nonsense", device="cpu", cache_dir=tmp_path)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("ViT-B-32:laion2b_s34b_b79k", "could not download ViT-B-32:laion2b_s34b_b79k: "),
        (
            "hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
            "could not download hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K: ",
        ),
    ],
)
def test_a_download_that_cannot_happen_is_a_clear_error(
    tmp_path, monkeypatch, spec, expected
) -> None:
    # Offline mode fails at once instead of retrying for a minute; the error path is the same.
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError) as caught:
        load_encoder(spec, device="cpu", cache_dir=tmp_path / "cache")
    assert str(caught.value).startswith(expected)
    assert "\n" not in str(caught.value)


def test_preprocessing_for_decode_threads_runs_no_torch_and_encodes_the_same(demo_encoder):
    """Decode threads get plain uint8 arrays: torch work there would start OpenMP teams that
    fight the encoder for the cores (indexing measured 3x slower). Results must not change."""
    from PIL import Image as PILImage

    image = PILImage.new("RGB", (120, 90), (200, 40, 40))
    prepared = demo_encoder.preprocess(image)
    assert isinstance(prepared, np.ndarray) and prepared.dtype == np.uint8
    assert prepared.shape == (demo_encoder.image_size, demo_encoder.image_size, 3)
    via_arrays = demo_encoder.encode_preprocessed([prepared])
    direct = demo_encoder.encode_preprocessed([demo_encoder._transform(image)])
    assert np.allclose(via_arrays, direct, atol=1e-5)


def test_a_hub_model_in_the_download_cache_loads_through_the_download_path(
    tiny_model_files, tmp_path, monkeypatch
) -> None:
    """What a user gets after the first-use download: the hub files in the user cache. Here
    the cache is laid out by hand (no network) and loaded through the same `hf-hub:` code."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    _, folder = tiny_model_files
    cache = tmp_path / "cache"
    repo = cache / "models--quadrat--tiny-clip"
    snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snapshot.name)
    (snapshot / "open_clip_config.json").write_text(
        json.dumps({"model_cfg": TINY_CONFIG, "preprocess_cfg": {}})
    )
    shutil.copy(folder / "tiny.safetensors", snapshot / "open_clip_model.safetensors")

    from_hub = load_encoder("hf-hub:quadrat/tiny-clip", device="cpu", cache_dir=cache)
    local = load_encoder(f"{TINY_ARCH}:{folder / 'tiny.safetensors'}", device="cpu")
    assert from_hub.model_key == "hf-hub:quadrat/tiny-clip"
    np.testing.assert_allclose(
        from_hub.encode_texts(["a frog calling"]), local.encode_texts(["a frog calling"]), atol=1e-6
    )
    np.testing.assert_allclose(
        from_hub.encode_images(_photos()), local.encode_images(_photos()), atol=1e-5
    )
