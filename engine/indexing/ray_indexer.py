"""Indexing on a Ray cluster: decode and encode run as Ray Data `map_batches` stages on the
cluster's workers, while this process stays the one writer of the library.

The plan (new, changed, moved, missing photos), the checkpoints, resume and skip reasons are the
local indexer's own (`engine.indexing.indexer`): only the stream of encoded photos comes from the cluster.
Decode tasks read each photo at its absolute path, so every node must see the collection at the
same path (a shared file system), and Quadrat must be installed on every node. Each encode actor
builds its encoder from the model spec (nothing of the model is pickled) and refuses to start
when its model key differs from this process's, so the vectors join the same library.

Ray is an optional dependency (`pip install 'quadrat[ray]'`), imported only when a run starts.
"""

from __future__ import annotations

import logging
import math
import pickle
import re
import socket
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np

from engine.catalog.library import Library
from engine.errors import BadInputError, ModelMismatchError, QuadratError
from engine.indexing.decode_pool import PhotoFailure, read_photo
from engine.indexing.indexer import Indexer
from engine.indexing.pipeline import Encoded, Failed, Prepared
from engine.indexing.plan import Job
from engine.indexing.report import IndexReport
from engine.models.encoders import Encoder
from engine.progress import CancelToken, ProgressCallback, no_progress

log = logging.getLogger(__name__)

RAY_MISSING = "indexing on a Ray cluster needs Ray: pip install 'quadrat[ray]'"
_NO_PIXELS = np.zeros(0, dtype=np.uint8)  # an encoded photo's pixels are not kept


def import_ray() -> Any:
    """The `ray` module with Ray Data, or a one-line `QuadratError` saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401  (the part we use; a bare `ray` install lacks its deps)
    except ImportError as error:
        raise QuadratError(RAY_MISSING) from error
    return ray


def _rgb_pixels(image: Any) -> np.ndarray:
    """The decoded photo as an (H, W, 3) uint8 array (`decode_image` returns RGB)."""
    return np.asarray(image, dtype=np.uint8)


def decode_batch(batch: dict[str, np.ndarray], min_side: int | None) -> dict[str, np.ndarray]:
    """Ray Data stage 1, on any worker: hash and decode photos as the local indexer does.

    Pixels travel as raw bytes with their shape (photos differ in size); a photo that cannot be
    used carries its skip reason instead."""
    out: dict[str, list[Any]] = {k: [] for k in ("job", "hash", "reason", "width", "height")}
    out |= {"exif": [], "pixels": [], "rows": [], "cols": []}
    for job, path, known in zip(batch["job"], batch["path"], batch["hash"], strict=True):
        read = read_photo(Path(str(path)), str(known) or None, min_side, _rgb_pixels)
        out["job"].append(int(job))
        if isinstance(read, PhotoFailure):
            out["hash"].append(read.content_hash or "")
            out["reason"].append(read.reason)
            out["width"].append(0)
            out["height"].append(0)
            out["exif"].append(b"")
            out["pixels"].append(b"")
            out["rows"].append(0)
            out["cols"].append(0)
            continue
        digest, decoded, pixels = read
        out["hash"].append(digest)
        out["reason"].append("")
        out["width"].append(decoded.width)
        out["height"].append(decoded.height)
        out["exif"].append(pickle.dumps(decoded.exif))
        out["pixels"].append(pixels.tobytes())
        out["rows"].append(pixels.shape[0])
        out["cols"].append(pixels.shape[1])
    return {
        key: np.array(values, dtype=object if key in ("hash", "reason", "exif", "pixels") else None)
        for key, values in out.items()
    }


class EncodeStage:
    """Ray Data stage 2, an actor: preprocess decoded photos and encode them in batches.

    The encoder is loaded here, from the spec, once per actor."""

    def __init__(
        self,
        spec: str,
        model_key: str,
        device: str,
        cache_dir: str | None,
        store_dir: str | None,
        slice_size: int,
    ) -> None:
        from engine.models.encoders import load_encoder

        self.encoder = load_encoder(
            spec,
            device=device,
            cache_dir=Path(cache_dir) if cache_dir else None,
            store_dir=Path(store_dir) if store_dir else None,
        )
        if self.encoder.model_key != model_key:
            raise ModelMismatchError(
                f"the model {spec} is {self.encoder.model_key} on this node, but "
                f"{model_key} where indexing started: install the same weights on every node"
            )
        self.slice_size = slice_size

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from PIL import Image

        reasons = [str(r) for r in batch["reason"]]
        tensors: list[Any] = []
        encoded_rows: list[int] = []
        for row, reason in enumerate(reasons):
            if reason:
                continue
            shape = (int(batch["rows"][row]), int(batch["cols"][row]), 3)
            pixels = np.frombuffer(batch["pixels"][row], dtype=np.uint8).reshape(shape)
            try:
                tensors.append(self.encoder.preprocess(Image.fromarray(pixels, "RGB")))
                encoded_rows.append(row)
            except Exception as exc:  # as the local indexer: one odd photo never stops a run
                log.exception("unexpected error preparing a photo")
                reasons[row] = f"unexpected error: {exc}"
        vectors = np.zeros((len(reasons), self.encoder.dim), dtype=np.float32)
        for start in range(0, len(tensors), self.slice_size):
            part = tensors[start : start + self.slice_size]
            rows = encoded_rows[start : start + self.slice_size]
            vectors[rows] = self.encoder.encode_preprocessed(part)
        return {
            "job": batch["job"],
            "hash": batch["hash"],
            "reason": np.array(reasons, dtype=object),
            "width": batch["width"],
            "height": batch["height"],
            "exif": batch["exif"],
            "vector": vectors,
        }


_OUR_ERROR = re.compile(r"^engine\.errors\.\w+: (.+)$", re.MULTILINE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail in seconds when nothing listens at a HOST:PORT address: `ray.init` would wait for
    minutes. Other forms ("auto", a ray:// URL without a port) are left to Ray."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise QuadratError(
            f"cannot connect to the Ray cluster at {address}: {reason.lower()} (is the head "
            "node started, with this address and port?)"
        ) from None


def _cluster_failure(error: BaseException) -> QuadratError:
    """A failure on the cluster as one line: our own error from a worker (a model that differs
    between nodes, say) by its message, anything else by its first line."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, QuadratError):
        return cause
    text = _ANSI.sub("", str(error)).strip()
    ours = _OUR_ERROR.findall(text)  # Ray passes an actor's failed start on as its traceback
    if ours:
        return QuadratError(ours[-1].strip())
    first = text.splitlines()[0] if text else type(error).__name__
    return QuadratError(f"indexing on the Ray cluster failed: {first}")


class RayIndexer(Indexer):
    """An `Indexer` whose photos are decoded and encoded on a Ray cluster.

    `encoder` is this process's copy of the model (its key, size and spec; it encodes nothing
    here). The cluster's encode actors load `encoder.spec` on `device`: "auto" takes one GPU per
    actor when the cluster has GPUs, else as many CPU actors as nodes."""

    def __init__(
        self,
        library: Library,
        encoder: Encoder,
        *,
        address: str = "auto",
        device: str = "auto",
        cache_dir: Path | None = None,
        store_dir: Path | None = None,
        batch_size: int = 32,
        checkpoint_every: int | None = None,
        index_save_seconds: float = 30.0,
    ) -> None:
        super().__init__(
            library,
            encoder,
            batch_size=batch_size,
            checkpoint_every=checkpoint_every,
            index_save_seconds=index_save_seconds,
        )
        if device not in ("auto", "cpu", "cuda"):
            raise BadInputError(
                f"device '{device}' cannot be used on a Ray cluster: auto, cpu or cuda"
            )
        self.address = address
        self.device = device
        self.cache_dir = cache_dir
        self.store_dir = store_dir

    def run(
        self,
        folder: str | Path,
        *,
        metadata: str | Path | None = None,
        reindex: bool = False,
        relocate: bool = True,
        prune: bool = False,
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> IndexReport:
        """As `Indexer.run`, connected to the cluster for the length of the run."""
        ray = import_ray()
        connected_here = not ray.is_initialized()
        if connected_here:
            _check_reachable(self.address)
            try:
                ray.init(
                    address=self.address,
                    logging_level=logging.WARNING,
                    log_to_driver=False,
                    configure_logging=False,
                )
            except (ConnectionError, RuntimeError, ValueError) as error:
                first = str(error).strip().splitlines()[0] if str(error).strip() else ""
                raise QuadratError(
                    f"cannot connect to the Ray cluster at {self.address}: {first}"
                ) from error
        try:
            return super().run(
                folder,
                metadata=metadata,
                reindex=reindex,
                relocate=relocate,
                prune=prune,
                progress=progress,
                cancel=cancel,
            )
        finally:
            if connected_here:
                ray.shutdown()

    def _actor_plan(self, ray: Any) -> tuple[str, int, dict[str, float]]:
        """(device, number of encode actors, the Ray resources of each) for this cluster."""
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        if self.device == "cuda" and gpus == 0:
            raise BadInputError("the Ray cluster reports no GPU: use --device cpu or auto")
        if gpus and self.device != "cpu":
            return "cuda", gpus, {"num_gpus": 1, "num_cpus": 1}
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        # As many CPU encoders as nodes, holding no CPU slot: an actor holding the only slot of
        # a one-CPU node would leave no slot to decode in, and the run would wait forever.
        # Ray starts them with OMP_NUM_THREADS=1: one torch thread each, beside the decode tasks.
        return "cpu", max(1, nodes), {"num_cpus": 0}

    def _encoded_stream(
        self, jobs: list[Job], cancel: CancelToken
    ) -> Generator[Encoded, None, None]:
        """Photos decoded and encoded on the cluster, received here in job order."""
        if not jobs:
            return
        ray = import_ray()
        device, actors, resources = self._actor_plan(ray)
        context = ray.data.DataContext.get_current()
        # In job order, so a photo gets the same catalog id as in a local run.
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        # "Progress bars disabled": on purpose, the indexer reports progress itself.
        logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)

        items = [
            {"job": i, "path": str(job.entry.abs_path), "hash": job.known_hash or ""}
            for i, job in enumerate(jobs)
        ]
        dataset = (
            ray.data.from_items(items, override_num_blocks=math.ceil(len(items) / self.batch_size))
            .map_batches(
                decode_batch,
                fn_kwargs={"min_side": self._min_side},
                batch_size=self.batch_size,
                batch_format="numpy",
                num_cpus=1,
            )
            .map_batches(
                EncodeStage,
                fn_constructor_kwargs={
                    "spec": self._spec(),
                    "model_key": self.model_key,
                    "device": device,
                    "cache_dir": str(self.cache_dir) if self.cache_dir else None,
                    "store_dir": str(self.store_dir) if self.store_dir else None,
                    "slice_size": self.batch_size,
                },
                batch_size=self.batch_size,
                batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(size=actors),
                **resources,
            )
        )
        log.info("indexing %d photos on %d %s encode actors", len(jobs), actors, device)
        batches = dataset.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=2)
        seen: set[int] = set()
        try:
            for batch in batches:
                cancel.check()
                yield self._received(jobs, batch, seen)
        except ray.exceptions.RayError as error:
            raise _cluster_failure(error) from error
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    @staticmethod
    def _received(jobs: list[Job], batch: dict[str, np.ndarray], seen: set[int]) -> Encoded:
        """Turn one batch from the cluster into the local indexer's encoded and failed photos.

        A photo already received is dropped: a batch that a restarted worker sent again must
        not add a second row for it."""
        encoded: list[tuple[Prepared, np.ndarray]] = []
        failed: list[Failed] = []
        for row, job_index in enumerate(int(i) for i in batch["job"]):
            if job_index in seen:
                log.warning("the cluster sent %s twice; kept once", jobs[job_index].entry.rel_path)
                continue
            seen.add(job_index)
            job = jobs[job_index]
            digest = str(batch["hash"][row]) or None
            reason = str(batch["reason"][row])
            if reason:
                failed.append(Failed(job, reason, digest))
                continue
            assert digest is not None  # a decoded photo was hashed
            prepared = Prepared(
                job,
                digest,
                int(batch["width"][row]),
                int(batch["height"][row]),
                pickle.loads(batch["exif"][row]),
                _NO_PIXELS,
            )
            encoded.append((prepared, np.asarray(batch["vector"][row], dtype=np.float32)))
        return len(encoded) + len(failed), encoded, failed
