"""The encode pipeline of an indexing run: photos hashed, decoded and preprocessed in a thread
pool (`read_photo`, `prepared_stream`), then encoded in batches in the calling thread
(`encoded_stream`), in job order. What it yields are plain records (`Prepared`, `Failed`); the
indexer commits them at checkpoints, and the Ray indexer yields the same from a cluster."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from engine.errors import BadImageError
from engine.indexing.decode import DecodeBudget, DecodedImage, decode_image
from engine.indexing.hashes import content_hash
from engine.indexing.plan import Job
from engine.models.encoders import Encoder
from engine.progress import CancelToken

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

CPU_CANCEL_SLICE = 8  # photos encoded between two cancel checks on a CPU

T = TypeVar("T")


@dataclass
class Prepared:
    """A photo hashed, decoded and preprocessed, ready for its batch."""

    job: Job
    content_hash: str
    width: int
    height: int
    exif: Any
    tensor: torch.Tensor | np.ndarray  # what `Encoder.preprocess` returned


@dataclass
class Failed:
    """A photo that cannot be indexed: its skip reason, and its content hash when known."""

    job: Job
    reason: str
    content_hash: str | None


# What an encoding stream yields: photos done, encoded photos with their vectors, failed ones.
Encoded = tuple[int, list[tuple[Prepared, np.ndarray]], list[Failed]]


@dataclass(frozen=True)
class PhotoFailure:
    """Why a photo cannot be indexed (its skip reason), and its content hash when known."""

    reason: str
    content_hash: str | None


def read_photo(
    path: Path,
    known_hash: str | None,
    min_side: int | None,
    transform: Callable[[Any], T],
    budget: DecodeBudget | None = None,
) -> tuple[str, DecodedImage, T] | PhotoFailure:
    """Hash, decode, orient and `transform` one photo (the encoder's preprocess, for one).

    Every unusable file becomes a `PhotoFailure` whose reason is the skip reason the catalog
    records; nothing raises, so one odd file never stops a run. Decodes share `budget` (the
    process's default when None), which bounds their memory together."""
    digest = known_hash
    try:
        if digest is None:
            digest = content_hash(path)
        # Large photos decode at reduced scale when the model wants far fewer pixels.
        decoded = decode_image(path, min_side=min_side, budget=budget)
        return digest, decoded, transform(decoded.image)
    except BadImageError as exc:
        return PhotoFailure(exc.reason, digest)
    except OSError as exc:
        return PhotoFailure(f"cannot read file: {exc.strerror or exc}", digest)
    except Exception as exc:  # one odd file must never stop the run
        log.exception("unexpected error preparing %s", path)
        return PhotoFailure(f"unexpected error: {exc}", digest)


def prepare(
    job: Job,
    min_side: int | None,
    preprocess: Callable[[Any], Any],
    budget: DecodeBudget | None = None,
) -> Prepared | Failed:
    """Runs in a worker thread: hash, decode, orient and preprocess one photo."""
    read = read_photo(job.entry.abs_path, job.known_hash, min_side, preprocess, budget)
    if isinstance(read, PhotoFailure):
        return Failed(job, read.reason, read.content_hash)
    digest, decoded, tensor = read
    return Prepared(job, digest, decoded.width, decoded.height, decoded.exif, tensor)


def prepared_stream(
    jobs: list[Job],
    prepare_one: Callable[[Job], Prepared | Failed],
    workers: int,
    ahead: int,
    cancel: CancelToken,
) -> Generator[Prepared | Failed, None, None]:
    """Yield `prepare_one` of each job in order from `workers` threads, keeping at most `ahead`
    decodes in flight (each holds a decoded photo). Closing the stream stops the threads."""
    in_flight: deque[Future[Prepared | Failed]] = deque()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="quadrat-decode")
    try:
        job_iter = iter(jobs)
        for job in job_iter:
            in_flight.append(pool.submit(prepare_one, job))
            if len(in_flight) >= ahead:
                break
        for job in job_iter:
            cancel.check()
            yield in_flight.popleft().result()
            in_flight.append(pool.submit(prepare_one, job))
        while in_flight:
            cancel.check()
            yield in_flight.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def encoded_stream(
    prepared: Iterable[Prepared | Failed],
    encoder: Encoder,
    batch_size: int,
    cancel: CancelToken,
) -> Generator[Encoded, None, None]:
    """Encode the `prepared` photos in batches of `batch_size`, in order. Yields (photos done,
    newly encoded photos with their vectors, newly failed photos); `Cancelled` may end it."""
    batch: list[Prepared] = []
    # On a CPU a batch of a real CLIP model takes seconds; encoding it in slices with a
    # cancel check between them keeps Cancel responsive within about a second.
    on_cpu = encoder.device.startswith("cpu")
    slice_size = min(batch_size, CPU_CANCEL_SLICE) if on_cpu else batch_size

    def encode_batch() -> Iterator[Encoded]:
        while batch:
            part = batch[:slice_size]
            vectors = encoder.encode_preprocessed([p.tensor for p in part])
            del batch[: len(part)]
            yield 0, list(zip(part, vectors, strict=True)), []
            if batch:
                cancel.check()

    for item in prepared:
        if isinstance(item, Failed):
            yield 1, [], [item]
            continue
        batch.append(item)
        if len(batch) >= batch_size:
            yield from encode_batch()
        yield 1, [], []
    yield from encode_batch()
