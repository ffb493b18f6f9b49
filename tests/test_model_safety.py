"""Model files that would run code are refused before any of it runs: TorchScript archives and
pickles naming code, whether picked as a CLIP checkpoint, inside a model folder or as a Stable
Diffusion checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from engine.errors import ModelLoadError
from engine.models.encoders import load_encoder, read_weights

MARKER = "QUADRAT-CODE-RAN"


class _Evil(torch.nn.Module):
    """A module whose TorchScript `__setstate__` prints a marker when the archive is loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(2))

    @torch.jit.export
    def __getstate__(self) -> tuple[torch.Tensor, bool]:
        return (self.weight, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, bool]) -> None:
        print("QUADRAT-CODE-RAN")
        self.weight = state[0]
        self.training = state[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@pytest.fixture(scope="module")
def scripted(tmp_path_factory) -> Path:
    """A TorchScript archive that runs code when loaded (proof: its marker on stdout)."""
    import warnings

    path = tmp_path_factory.mktemp("scripted") / "clip.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.jit.script is deprecated"
        torch.jit.script(_Evil()).save(str(path))
    return path


def _refused(message: str, path: Path) -> None:
    assert "\n" not in message
    assert str(path) in message
    assert "TorchScript archive, which runs code" in message
    assert "safetensors" in message and "state-dict" in message  # what to use instead


def test_a_torchscript_checkpoint_is_refused_and_its_code_never_runs(scripted, capfd) -> None:
    with pytest.raises(ModelLoadError) as caught:
        load_encoder(f"quadrat-demo:{scripted}", device="cpu")
    _refused(str(caught.value), scripted)
    with pytest.raises(ModelLoadError):
        read_weights(scripted)
    assert MARKER not in capfd.readouterr().out


def test_a_torchscript_file_with_a_weights_name_in_a_model_folder_is_refused(
    scripted, tmp_path, capfd
) -> None:
    from tests.test_encoders import TINY_CONFIG

    folder = tmp_path / "my-clip"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY_CONFIG}))
    shutil.copy(scripted, folder / "open_clip_pytorch_model.bin")
    with pytest.raises(ModelLoadError) as caught:
        load_encoder(f"local-dir:{folder}", device="cpu")
    _refused(str(caught.value), folder / "open_clip_pytorch_model.bin")
    assert MARKER not in capfd.readouterr().out


class _Payload:
    """Unpickling this would create a file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_stable_diffusion_checkpoint_that_would_run_code_is_refused_in_one_line(
    scripted, tmp_path, capfd
) -> None:
    pytest.importorskip("diffusers")
    from engine.visret.diffusers_backend import load_diffusers

    ckpt = tmp_path / "scripted.ckpt"
    shutil.copy(scripted, ckpt)
    with pytest.raises(ModelLoadError) as caught:
        load_diffusers(str(ckpt), device="cpu", cache_dir=tmp_path / "cache")
    _refused(str(caught.value), ckpt)
    assert MARKER not in capfd.readouterr().out

    marker = tmp_path / "code-ran"
    pickled = tmp_path / "pickled.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "hook": _Payload(marker)}, pickled)
    with pytest.raises(ModelLoadError) as caught:
        load_diffusers(str(pickled), device="cpu", cache_dir=tmp_path / "cache")
    assert str(caught.value) == (
        f"refusing to load {pickled}: it is not a plain weights file (it contains code: io.open)"
    )
    assert not marker.exists()
