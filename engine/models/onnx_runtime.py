"""The ONNX runtime for both towers on the CPU: export, verification, sessions, an `Encoder`.

A model's towers are exported once per model key from its torch model (on first use on a CPU,
with progress) into the model store, beside the models::

    STORE/.onnx/<slug of the model key>/image.onnx   uint8 (n, H, W, 3) pixels -> unit vectors
    STORE/.onnx/<slug of the model key>/text.onnx    int64 (n, context) tokens -> unit vectors
    STORE/.onnx/<slug of the model key>/onnx.json    what was exported, verified or refused

Each tower is verified against torch on a fixed probe batch (every row's cosine at least
`PROBE_COSINE`); a tower that fails is refused, recorded as such (not tried again for that
model key and exporter) and torch encodes instead, said in one line. Exports are made in a
temporary folder and renamed into place, so a killed export leaves nothing half-written.
An export is bound to its model and its files (`engine.models.onnx_checks`): the weights'
hash and each file's hash are recorded, and checked before a session opens; one that fails is
not used (one line; torch encodes), and made again where an export may be made.

The vectors are the torch model's (same model key), so libraries need no re-indexing. Torch
stays for GPUs, training and whatever cannot be exported. A text search needs no torch at all
when the text tower is exported and the model tokenizes with CLIP's byte-pair encoding:
`ClipTokenizer` is a torch-free copy of open_clip's `SimpleTokenizer` (both from OpenAI's CLIP,
MIT licence) reading open_clip's vocabulary file without importing open_clip
(`engine.models.clip_tokenizer`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import BadInputError, one_line
from engine.files import atomic_write_text
from engine.models.clip_tokenizer import ClipTokenizer as ClipTokenizer  # re-exported
from engine.models.clip_tokenizer import clip_tokenizer
from engine.models.folders import folder_slug
from engine.models.onnx_checks import (
    file_problem,
    file_record,
    path_problem,
    remember_checked,
    safe_to_remove,
    weights_identity,
    weights_problem,
)
from engine.progress import Progress, ProgressCallback

if TYPE_CHECKING:
    import onnxruntime  # type: ignore[import-untyped]
    import torch
    from PIL import Image

    from engine.models.encoders import Encoder, OpenClipEncoder
    from engine.models.spec import ModelSpec

log = logging.getLogger(__name__)

RUNTIMES = ("auto", "torch", "onnx")
"""`--runtime` and the `runtime` setting: auto is ONNX on the CPU when the model exports, else
torch; torch never uses ONNX; onnx encodes on the CPU with ONNX (torch only where a tower is
refused)."""

ONNX_DIR = ".onnx"  # hidden: the store's listing skips it, it holds no model of its own
IMAGE_FILE, TEXT_FILE, MANIFEST_FILE = "image.onnx", "text.onnx", "onnx.json"
# Raised when the exported graphs or their record change: older exports are made again
# (2: each file's hashes and the weights' hash recorded).
EXPORT_FORMAT = 2
PROBE_COSINE = 0.9999  # each probe row's cosine to torch's vector, or the tower is refused
OPSET = 17
_PROBE_TEXTS = (
    "a photo of a heron standing in shallow water",
    "Fungi on a fallen log, close-up",
    "red-tailed hawk",
    "",
)
_TEXT_BATCH = 256
_IMAGE_BATCH = 64


def onnx_runtime_installed() -> bool:
    """Whether onnxruntime can be imported (without importing it)."""
    return importlib.util.find_spec("onnxruntime") is not None


def check_runtime(runtime: str) -> str:
    """`runtime` lower-cased, or `BadInputError` naming the valid ones."""
    wanted = runtime.strip().lower()
    if wanted not in RUNTIMES:
        raise BadInputError(f"runtime '{runtime}' is not one of {', '.join(RUNTIMES)}")
    return wanted


def cpu_threads() -> int:
    """Threads for a CPU encoder, torch's or ONNX Runtime's: one on two cores or fewer, else
    all but a quarter of the cores (left to the photos' decoding); OMP_NUM_THREADS, when set,
    wins. Why one on two cores: `engine.models.encoders.cpu_encoder_threads`."""
    if os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    cores = os.cpu_count() or 1
    return 1 if cores <= 2 else cores - cores // 4


# ---------------------------------------------------------------------------------------------
# The export's record


@dataclass(frozen=True)
class TowerRecord:
    """One tower of an export: its file when verified, else why it was refused."""

    file: str | None
    min_cosine: float | None
    refused: str | None
    hashes: dict[str, Any] | None = None  # the file's size, sha256, sample hash (onnx_checks)

    @property
    def usable(self) -> bool:
        return self.file is not None and self.refused is None

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "min_cosine": self.min_cosine,
            "refused": self.refused,
            **(self.hashes or {}),
        }

    @staticmethod
    def from_json(data: Any) -> TowerRecord:
        if not isinstance(data, dict):
            return TowerRecord(None, None, "not recorded")
        file, cosine, refused = data.get("file"), data.get("min_cosine"), data.get("refused")
        return TowerRecord(
            file if isinstance(file, str) else None,
            float(cosine) if isinstance(cosine, (int, float)) else None,
            refused if isinstance(refused, str) else None,
            {k: data[k] for k in ("size", "sha256", "sample_sha256") if k in data},
        )


@dataclass(frozen=True)
class OnnxExport:
    """What `onnx.json` says of a model key's export, and where it lies."""

    folder: Path
    model_key: str
    spec: str
    dim: int
    image: TowerRecord
    text: TowerRecord
    context_length: int | None  # the text tower's token count
    tokenizer: str | None  # "clip-bpe": `ClipTokenizer` reproduces the model's; else None
    exporter: str = ""  # the torch that exported it ("torch 2.14.1")
    weights_sha256: str | None = None  # of the weights it was exported from (`weights_identity`)

    @property
    def refusals(self) -> bool:
        return self.image.refused is not None or self.text.refused is not None

    @property
    def runtimes(self) -> list[str]:
        """The runtimes that encode this model: torch always, onnx when a tower is usable."""
        return ["torch", "onnx"] if self.image.usable or self.text.usable else ["torch"]

    def path(self, tower: TowerRecord) -> Path:
        assert tower.file is not None
        return self.folder / tower.file

    def refusing(self, image: str | None, text: str | None) -> OnnxExport:
        """This export with its image and/or text tower refused for the reasons given."""
        return replace(
            self,
            image=TowerRecord(None, None, image) if image else self.image,
            text=TowerRecord(None, None, text) if text else self.text,
        )


def export_folder(store_dir: Path, model_key: str) -> Path:
    """Where the ONNX export of `model_key` lies in the store at `store_dir`."""
    return Path(store_dir) / ONNX_DIR / folder_slug(model_key)


def read_export(store_dir: Path, model_key: str) -> OnnxExport | None:
    """The export of `model_key` in the store, or None when there is none of this format (or
    its record is unreadable: it is then made again). Cheap: no torch, no onnxruntime."""
    folder = export_folder(store_dir, model_key)
    try:
        data = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("format") != EXPORT_FORMAT
        or data.get("model_key") != model_key
    ):
        return None
    context = data.get("context_length")
    tokenizer = data.get("tokenizer")
    weights = data.get("weights_sha256")
    return OnnxExport(
        folder=folder,
        model_key=model_key,
        spec=str(data.get("spec", "")),
        dim=int(data.get("dim", 0)),
        image=TowerRecord.from_json(data.get("image")),
        text=TowerRecord.from_json(data.get("text")),
        context_length=context if isinstance(context, int) else None,
        tokenizer=tokenizer if isinstance(tokenizer, str) else None,
        exporter=str(data.get("exporter", "")),
        weights_sha256=weights if isinstance(weights, str) else None,
    )


def export_problems(
    store_dir: Path, export: OnnxExport, spec: ModelSpec | str
) -> tuple[str | None, str | None]:
    """Why the image and the text tower of `export` may not be opened (each None when it may,
    or was refused anyway): the checks of `engine.models.onnx_checks`, the file's name, links,
    size and hashes, and the model's weights against those it was exported from."""
    weights = weights_problem(
        export.weights_sha256, weights_identity(store_dir, spec, export.model_key)
    )
    found: list[str | None] = []
    for tower, name in ((export.image, IMAGE_FILE), (export.text, TEXT_FILE)):
        if not tower.usable:
            found.append(None)
        else:
            found.append(
                weights or file_problem(export.folder, tower.file, name, tower.hashes or {})
            )
    return found[0], found[1]


def checked_export(store_dir: Path, model_key: str, spec: ModelSpec | str) -> OnnxExport | None:
    """The export of `model_key` as `read_export` gives it, with any tower that fails its
    checks (`export_problems`) refused, said in one line: torch encodes that tower."""
    export = read_export(store_dir, model_key)
    return None if export is None else _checked(store_dir, export, spec)


def _checked(store_dir: Path, export: OnnxExport, spec: ModelSpec | str) -> OnnxExport:
    image, text = export_problems(store_dir, export, spec)
    if image or text:
        reasons = "; ".join(dict.fromkeys(r for r in (image, text) if r))
        line = f"ONNX export of {export.model_key} not used ({reasons}); torch encodes it"
        said = (str(export.folder), line)
        if said not in _SAID:  # once a process: a quick search's fallback checks it again
            _SAID.add(said)
            log.warning("%s", line)
        export = export.refusing(image, text)
    return export


_SAID: set[tuple[str, str]] = set()


def exports_by_spec(store_dir: Path) -> dict[str, list[OnnxExport]]:
    """Every export in the store, by the spec its model was loaded as (cheap: records only)."""
    found: dict[str, list[OnnxExport]] = {}
    root = Path(store_dir) / ONNX_DIR
    with contextlib.suppress(OSError):
        for record in sorted(root.glob(f"*/{MANIFEST_FILE}")):
            with contextlib.suppress(OSError, ValueError):
                key = json.loads(record.read_text(encoding="utf-8")).get("model_key")
                export = read_export(store_dir, key) if isinstance(key, str) else None
                if export is not None and export.folder == record.parent:
                    found.setdefault(export.spec, []).append(export)
    return found


def runtimes_of(spec: str, exports: dict[str, list[OnnxExport]]) -> list[str]:
    """The runtimes an installed encoder has: torch, and onnx once a tower is exported."""
    return (
        ["torch", "onnx"]
        if any("onnx" in export.runtimes for export in exports.get(spec, []))
        else ["torch"]
    )


def remove_export(store_dir: Path, model_key: str) -> None:
    """Remove the export of `model_key` (its model left the store)."""
    shutil.rmtree(export_folder(store_dir, model_key), ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Export and verification (torch)


def ensure_export(
    encoder: OpenClipEncoder, store_dir: Path, progress: ProgressCallback | None = None
) -> OnnxExport:
    """The export of `encoder`'s model, made now when the store has none (both towers exported
    and verified against `encoder` on the probe batch; a tower that cannot be exported or
    fails verification is recorded as refused). Failing to write the store -> OSError."""
    found = read_export(store_dir, encoder.model_key) or _bind_older_export(encoder, store_dir)
    problems = (None, None) if found is None else export_problems(store_dir, found, encoder.spec)
    if found is not None and any(problems):
        reasons = "; ".join(dict.fromkeys(r for r in problems if r))
        log.warning("ONNX export of %s refused (%s); exporting it again", encoder.model_key,
                    reasons)  # fmt: skip
    elif found is not None and not (found.refusals and found.exporter != _exporter()):
        return found  # a refusal is tried again with another torch, whose exporter may do
    report = progress or (lambda _p: None)
    final = export_folder(store_dir, encoder.model_key)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(final.parent)
    temp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=final.parent))
    try:
        log.info("exporting %s to ONNX (once per model)", encoder.model_key)
        report(Progress(0, 2, message="exporting the image tower to ONNX"))
        image = _export_tower(encoder, temp, "image")
        report(Progress(1, 2, message="exporting the text tower to ONNX"))
        text = _export_tower(encoder, temp, "text")
        report(Progress(2, 2, message="exported to ONNX"))
        tokenizer = "clip-bpe" if _is_clip_bpe(encoder) else None
        image, text = _with_hashes(temp, image), _with_hashes(temp, text)
        record = {
            "format": EXPORT_FORMAT,
            "model_key": encoder.model_key,
            "spec": str(getattr(encoder.spec, "spec", encoder.spec)),
            "dim": encoder.dim,
            "image": image.to_json(),
            "text": text.to_json(),
            "context_length": _context_length(encoder),
            "tokenizer": tokenizer,
            "opset": OPSET,
            "probe_cosine": PROBE_COSINE,
            "exporter": _exporter(),
            "weights_sha256": weights_identity(store_dir, encoder.spec, encoder.model_key),
        }
        atomic_write_text(temp / MANIFEST_FILE, json.dumps(record, indent=2))
        if read_export(store_dir, encoder.model_key) in (None, found):
            safe_to_remove(final)  # an export of an older format, a refusal, a bad one
            os.replace(temp, final)
        # else another process finished the same export meanwhile: it is kept
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    found = read_export(store_dir, encoder.model_key)
    assert found is not None
    return found


def _with_hashes(folder: Path, tower: TowerRecord) -> TowerRecord:
    """`tower` with its file's hashes (remembered as checked: they were taken just now)."""
    if tower.file is None:
        return tower
    hashes = file_record(folder / tower.file)
    remember_checked(folder, tower.file, hashes["sha256"])
    return replace(tower, hashes=hashes)


def _exporter() -> str:
    """The torch version that exports (read from its metadata: no import)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"torch {version('torch')}"
    except PackageNotFoundError:
        return "torch"


def _remove_abandoned(parent: Path) -> None:
    """Remove the temporary folders of exports killed over an hour ago."""
    import time

    with contextlib.suppress(OSError):
        for entry in parent.glob(".incoming-*"):
            if time.time() - entry.stat().st_mtime > 3600:
                shutil.rmtree(entry, ignore_errors=True)


def _image_module(encoder: OpenClipEncoder) -> torch.nn.Module:
    """uint8 (n, H, W, 3) pixels -> unit vectors, as `OpenClipEncoder.encode_preprocessed`."""
    import torch

    mean, std = encoder._mean.detach().cpu().clone(), encoder._std.detach().cpu().clone()

    class ImageTower(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = encoder.model

        def forward(self, pixels: torch.Tensor) -> torch.Tensor:
            x = pixels.permute(0, 3, 1, 2).float() / 255.0
            x = (x - mean) / std
            features = self.model.encode_image(x)
            return torch.nn.functional.normalize(features.float(), dim=-1)

    return ImageTower().eval()


def _text_module(encoder: OpenClipEncoder) -> torch.nn.Module:
    """int64 (n, context) tokens -> unit vectors, as `OpenClipEncoder.encode_texts`."""
    import torch

    class TextTower(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = encoder.model

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            features = self.model.encode_text(tokens)
            return torch.nn.functional.normalize(features.float(), dim=-1)

    return TextTower().eval()


def _probe_pixels(encoder: OpenClipEncoder) -> np.ndarray:
    """A fixed batch of four images: noise, a gradient, flat grey, noise again (seeded)."""
    side = encoder.image_size
    rng = np.random.default_rng(20250)
    noise = rng.integers(0, 256, size=(2, side, side, 3), dtype=np.uint8)
    ramp = np.linspace(0, 255, side, dtype=np.float32)
    gradient = np.stack([np.add.outer(ramp, ramp) / 2] * 3, axis=-1).astype(np.uint8)
    grey = np.full((side, side, 3), 128, dtype=np.uint8)
    return np.stack([noise[0], gradient, grey, noise[1]])


def _export_tower(encoder: OpenClipEncoder, folder: Path, which: str) -> TowerRecord:
    """Export one tower into `folder` and verify it; refusals are records, not errors."""
    import torch

    file = IMAGE_FILE if which == "image" else TEXT_FILE
    if which == "image" and encoder._mean is None:
        return TowerRecord(None, None, "its preprocessing is not resize, crop and normalise")
    try:
        module = _image_module(encoder) if which == "image" else _text_module(encoder)
        names = ("pixels" if which == "image" else "tokens", "vectors")
        probe = torch.from_numpy(_probe_inputs(encoder, which))
        on_device = next(module.parameters()).device
        module = module.to("cpu")
        try:
            # Gradients on: with them off, attention takes torch's fused fast path, an operator
            # the exporter cannot write. The exporter prints the whole graph when it fails:
            # the failure is reported in one line instead.
            with (
                warnings.catch_warnings(),
                torch.enable_grad(),
                contextlib.redirect_stdout(io.StringIO()),
            ):
                warnings.simplefilter("ignore")  # the exporter's tracer and deprecation notes
                torch.onnx.export(
                    module,
                    (probe,),
                    str(folder / file),
                    input_names=[names[0]],
                    output_names=[names[1]],
                    dynamic_axes={names[0]: {0: "n"}, names[1]: {0: "n"}},
                    opset_version=OPSET,
                    dynamo=False,
                )
        finally:
            module.to(on_device)
        cosine = probe_cosine(encoder, folder / file, which)
    except Exception as error:  # any exporter or runtime failure: torch stays
        (folder / file).unlink(missing_ok=True)
        return TowerRecord(None, None, f"cannot be exported: {one_line(error, 200)}")
    if not cosine >= PROBE_COSINE:  # not >=: a NaN is refused too
        (folder / file).unlink(missing_ok=True)
        return TowerRecord(
            None, cosine, f"cosine {cosine:.6f} to torch on the probe batch, below {PROBE_COSINE}"
        )
    return TowerRecord(file, cosine, None)


def _probe_inputs(encoder: OpenClipEncoder, which: str) -> np.ndarray:
    """The probe batch of a tower: pixels (`_probe_pixels`) or the probe texts' tokens."""
    if which == "image":
        return _probe_pixels(encoder)
    return np.asarray(encoder._tokenizer(list(_PROBE_TEXTS)).cpu().numpy(), dtype=np.int64)


def probe_cosine(encoder: OpenClipEncoder, path: Path, which: str) -> float:
    """The lowest cosine, over the probe batch, of the ONNX tower in `path` to `encoder`'s
    vectors (onnxruntime's failure to open or run it is raised)."""
    inputs = _probe_inputs(encoder, which)
    if which == "image":
        expected = encoder.encode_preprocessed(list(inputs))
    else:
        expected = encoder.encode_texts(list(_PROBE_TEXTS))
    got = open_session(path, threads=1).run(
        None, {"pixels" if which == "image" else "tokens": inputs}
    )[0]
    return float(np.min(np.sum(np.asarray(got, dtype=np.float64) * expected, axis=1)))


def _bind_older_export(encoder: OpenClipEncoder, store_dir: Path) -> OnnxExport | None:
    """An export made before exports were bound to their model (format 1), bound now: each
    usable tower checked again against `encoder` on the probe batch (a moment, no export),
    then recorded with its hashes and the weights'. None when there is none, or when a tower
    is not where it must be or no longer gives the model's vectors (it is made again then)."""
    folder = export_folder(store_dir, encoder.model_key)
    try:
        data = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != 1:
        return None
    if data.get("model_key") != encoder.model_key:
        return None
    try:
        for which, name in (("image", IMAGE_FILE), ("text", TEXT_FILE)):
            tower = TowerRecord.from_json(data.get(which))
            if not tower.usable:
                continue
            if path_problem(folder, tower.file, name) or not (
                probe_cosine(encoder, folder / name, which) >= PROBE_COSINE
            ):
                return None
            data[which] = {**data[which], **_with_hashes(folder, tower).to_json()}
        data["format"] = EXPORT_FORMAT
        data["weights_sha256"] = weights_identity(store_dir, encoder.spec, encoder.model_key)
        atomic_write_text(folder / MANIFEST_FILE, json.dumps(data, indent=2))
    except Exception as error:  # a file onnxruntime cannot run, a store it cannot write
        log.info("older ONNX export of %s not kept: %s", encoder.model_key, one_line(error, 160))
        return None
    log.info("older ONNX export of %s checked against the model again and kept", encoder.model_key)
    return read_export(store_dir, encoder.model_key)


def _context_length(encoder: OpenClipEncoder) -> int | None:
    length = getattr(encoder._tokenizer, "context_length", None)
    return int(length) if isinstance(length, int) else None


def _is_clip_bpe(encoder: OpenClipEncoder) -> bool:
    """Whether `ClipTokenizer` gives `encoder`'s tokens: open_clip's `SimpleTokenizer` with its
    own vocabulary, lower-casing clean-up and plain truncation (checked on the probe texts)."""
    tokenizer = encoder._tokenizer
    if type(tokenizer).__name__ != "SimpleTokenizer" or tokenizer.reduction_fn is not None:
        return False
    length = _context_length(encoder)
    if length is None or getattr(tokenizer.clean_fn, "__name__", "") != "_clean_lower":
        return False
    if len(tokenizer.encoder) != len(clip_tokenizer().encoder):
        return False  # additional special tokens
    texts = [*_PROBE_TEXTS, "Ünïcödé — &amp; naïve café's 12 birds!!"]
    return bool(np.array_equal(tokenizer(texts).numpy(), clip_tokenizer().tokens(texts, length)))


# ---------------------------------------------------------------------------------------------
# Sessions and the encoder (no torch)


def open_session(path: Path, threads: int) -> onnxruntime.InferenceSession:
    """An onnxruntime CPU session on `threads` threads, with every graph optimisation."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Waiting threads spin (onnxruntime's default). Turning spinning off helped only on a
    # machine loaded far beyond its cores (1.68x torch against 1.24x at 2 threads); on a
    # quieter one it once took all of the second thread's gain (10.9 img/s at 2 threads
    # against 18.0 with spinning) and once changed nothing (docs/BENCHMARKS.md).
    options.log_severity_level = 3  # its warnings about unused initialisers mean nothing here
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxEncoder:
    """An `Encoder` whose towers run in onnxruntime on the CPU, with the torch model's key and
    vectors. A tower that was refused, and preprocessing when no PIL steps were given (a
    torch-free text search), come from `fallback`, the torch encoder, loaded when first
    needed."""

    runtime = "onnx"
    device = "cpu"

    def __init__(
        self,
        export: OnnxExport,
        spec: ModelSpec | str,
        fallback: Callable[[], Encoder],
        *,
        image_steps: list[Any] | None = None,
        image_size: int | None = None,
        tokenize: Callable[[list[str]], np.ndarray] | None = None,
        threads: int | None = None,
    ) -> None:
        self.model_key = export.model_key
        self.dim = export.dim
        self.spec = spec
        self.export = export
        self._fallback_loader = fallback
        self._fallback: Encoder | None = None
        self._steps = image_steps
        self._tokenize = tokenize
        self._threads = threads or cpu_threads()
        self._sessions: dict[str, onnxruntime.InferenceSession] = {}
        if image_size is not None:
            # The side the model sees: decoders may decode large JPEGs at a reduced scale.
            self.image_size = image_size

    def __repr__(self) -> str:
        return f"OnnxEncoder({self.model_key!r}, dim={self.dim})"

    def _session(self, tower: TowerRecord) -> onnxruntime.InferenceSession | None:
        """The tower's session; None (said in one line, the tower refused from now on, torch
        encoding it) when onnxruntime cannot open its file."""
        assert tower.file is not None
        if tower.file not in self._sessions:
            try:
                self._sessions[tower.file] = open_session(self.export.path(tower), self._threads)
            except Exception as error:  # onnxruntime's own errors: a file it cannot read
                reason = f"{tower.file} does not open: {one_line(error, 160)}"
                log.warning("ONNX export of %s not used (%s); torch encodes it",
                            self.model_key, reason)  # fmt: skip
                image = reason if tower is self.export.image else None
                self.export = self.export.refusing(image, None if image else reason)
                return None
        return self._sessions[tower.file]

    @property
    def pil_steps(self) -> list[Any] | None:
        """The torch transform's PIL steps (resize, crop), as `OpenClipEncoder.pil_steps`: with
        them decode worker processes resize and crop for this encoder too
        (`engine.indexing.decode_pool.pixel_steps_of`); None for a text-only encoder."""
        return None if self._steps is None else list(self._steps)

    def fallback(self) -> Encoder:
        """The torch encoder, loaded on first use."""
        if self._fallback is None:
            self._fallback = self._fallback_loader()
        return self._fallback

    def preprocess(self, image: Image.Image) -> torch.Tensor | np.ndarray:
        """Resize and crop one image for the model: a uint8 (H, W, 3) array (worker threads)."""
        if self._steps is None:
            return self.fallback().preprocess(image)
        image = image.convert("RGB")
        for step in self._steps:
            image = step(image)
        return np.asarray(image.convert("RGB"), dtype=np.uint8)

    def encode_preprocessed(self, batch: Sequence[torch.Tensor | np.ndarray]) -> np.ndarray:
        """Encode preprocessed images: an (n, dim) float32 array of unit vectors."""
        if len(batch) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if not self.export.image.usable or not isinstance(batch[0], np.ndarray):
            return self.fallback().encode_preprocessed(batch)
        session = self._session(self.export.image)
        if session is None:
            return self.fallback().encode_preprocessed(batch)
        pixels = np.ascontiguousarray(np.stack(batch), dtype=np.uint8)
        vectors = session.run(None, {"pixels": pixels})[0]
        return np.asarray(vectors, dtype=np.float32)

    def encode_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """Encode PIL images: an (n, dim) float32 array of unit vectors."""
        parts = [
            self.encode_preprocessed(
                [self.preprocess(image) for image in images[i : i + _IMAGE_BATCH]]
            )
            for i in range(0, len(images), _IMAGE_BATCH)
        ]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts (truncated at the model's context length): (n, dim) unit vectors."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if not self.export.text.usable or self._tokenize is None:
            return self.fallback().encode_texts(texts)
        session = self._session(self.export.text)
        if session is None:
            return self.fallback().encode_texts(texts)
        parts = [
            session.run(None, {"tokens": self._tokenize(list(texts[i : i + _TEXT_BATCH]))})[0]
            for i in range(0, len(texts), _TEXT_BATCH)
        ]
        return np.asarray(np.concatenate(parts), dtype=np.float32)


def onnx_encoder_for(
    encoder: OpenClipEncoder,
    store_dir: Path,
    runtime: str,
    progress: ProgressCallback | None = None,
    *,
    export: bool = True,
) -> Encoder:
    """`encoder` on the ONNX runtime (exported first when needed and `export` allows), or
    `encoder` itself when neither tower can run there (said in one line)."""
    if not onnx_runtime_installed():
        if runtime == "onnx":
            raise BadInputError("the ONNX runtime is not installed (pip install onnxruntime)")
        return encoder
    if not export:  # only an export already there, checked (a bad one is said and not used)
        recorded = read_export(store_dir, encoder.model_key) or _bind_older_export(
            encoder, store_dir
        )
        if recorded is None:
            return encoder
        made = _checked(store_dir, recorded, encoder.spec)
    else:
        try:
            made = recorded = ensure_export(encoder, store_dir, progress)
        except OSError as error:
            log.warning("ONNX export of %s not written, using torch: %s", encoder.model_key,
                        error)  # fmt: skip
            return encoder
    for name, tower in (("image", recorded.image), ("text", recorded.text)):
        if tower.refused:  # at export (a check's refusal was said by `_checked`)
            log.warning(
                "ONNX %s tower of %s refused (%s); torch encodes it",
                name,
                encoder.model_key,
                tower.refused,
            )
    if not (made.image.usable or made.text.usable):
        return encoder
    tokenizer = encoder._tokenizer

    def tokenize(texts: list[str]) -> np.ndarray:
        return np.asarray(tokenizer(texts).numpy(), dtype=np.int64)

    return OnnxEncoder(
        made,
        encoder.spec,
        lambda: encoder,
        image_steps=encoder._pil_steps,
        image_size=encoder.image_size,
        tokenize=tokenize,
    )


def text_encoder_from_store(
    store_dir: Path, model_key: str, spec: ModelSpec | str, fallback: Callable[[], Encoder]
) -> OnnxEncoder | None:
    """An encoder for text queries that needs no torch: the export's text tower and
    `ClipTokenizer`, or None when the store holds no such export of `model_key` (or
    onnxruntime is missing). Anything else it is asked for comes from `fallback`."""
    if not onnx_runtime_installed():
        return None
    export = checked_export(store_dir, model_key, spec)
    if (
        export is None
        or not export.text.usable
        or export.tokenizer != "clip-bpe"
        or export.context_length is None
        or not onnx_runtime_installed()
    ):
        return None
    length = export.context_length
    return OnnxEncoder(
        export, spec, fallback, tokenize=lambda texts: clip_tokenizer().tokens(texts, length)
    )
