"""The encode pipeline of an indexing run: photos hashed, decoded and preprocessed in a thread
pool (`read_photo`, `prepared_stream`) or in worker processes (`process_prepared_stream`, from
`decode_pool`), then encoded in batches in the calling thread (`encoded_stream`), in job order.
What it yields are plain records (`Prepared`, `Failed`); the indexer commits them at
checkpoints, and the Ray indexer yields the same from a cluster."""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from PIL import Image as PILImage

from engine.indexing.decode import DEFAULT_MAX_PIXELS, DecodeBudget
from engine.indexing.decode_pool import (
    DecodedPixels,
    PhotoFailure,
    PixelSteps,
    decoded_in_processes,
    read_photo,
)
from engine.indexing.exif import read_exif
from engine.indexing.plan import Job
from engine.models.encoders import Encoder
from engine.progress import CancelToken

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

CPU_CANCEL_SLICE = 8  # photos encoded between two cancel checks on a CPU


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


def process_prepared_stream(
    jobs: list[Job],
    steps: PixelSteps,
    min_side: int | None,
    workers: int,
    ahead: int,
    cancel: CancelToken,
    *,
    slot_bytes: int,
    decode_memory: int | None = None,
) -> Generator[Prepared | Failed, None, None]:
    """`prepared_stream`'s records, the photos read in `workers` processes
    (`decode_pool.decoded_in_processes`); closing the stream stops the processes."""
    photos = [(job.entry.abs_path, job.known_hash) for job in jobs]
    extra = {"decode_memory": decode_memory} if decode_memory else {}
    stream = decoded_in_processes(
        photos, steps, min_side, workers, ahead, cancel, slot_bytes=slot_bytes, **extra
    )
    try:
        for job, read in zip(jobs, stream, strict=False):
            if isinstance(read, PhotoFailure):
                yield Failed(job, read.reason, read.content_hash)
            else:
                yield _prepared_from(job, read)
    finally:
        stream.close()


def _prepared_from(job: Job, read: DecodedPixels) -> Prepared:
    return Prepared(job, read.content_hash, read.width, read.height, read.exif, read.pixels)


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


# --------------------------------------------------------------------------------------------
# JPEG decoding on the GPU (nvJPEG through torchvision), for `Indexer(decode="gpu")`


def gpu_jpeg_decoder(device: str) -> Callable[..., Any] | None:
    """torchvision's batched `decode_jpeg` when it decodes on `device` (a CUDA device, and a
    probe JPEG decoded there), else None: the photos are then decoded on the CPU."""
    if not device.startswith("cuda"):
        return None
    try:
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg  # type: ignore[import-untyped]

        if not torch.cuda.is_available():
            return None
        buffer = io.BytesIO()
        PILImage.new("RGB", (16, 8), (200, 30, 30)).save(buffer, "JPEG")
        probe = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
        decoded = decode_jpeg([probe], device=device, mode=ImageReadMode.RGB)
        if tuple(decoded[0].shape) != (3, 8, 16):
            return None
    except Exception as exc:  # an old torchvision, a CUDA build without nvJPEG, a driver error
        log.info("JPEG decoding on the GPU is not available: %s", exc)
        return None
    return cast(Callable[..., Any], decode_jpeg)


@dataclass
class _JpegRead:
    """A plain JPEG read on the CPU for the GPU to decode: its bytes, hash, size and EXIF."""

    job: Job
    content_hash: str
    data: bytes
    width: int
    height: int
    exif: Any


def _read_jpeg(
    job: Job, max_pixels: int, fallback: Callable[[Job], Prepared | Failed]
) -> _JpegRead | Prepared | Failed:
    """Runs in a thread: a plain RGB or greyscale JPEG's bytes and header, or anything else
    prepared on the CPU by `fallback` (other formats, CMYK, too large, unreadable)."""
    try:
        data = job.entry.abs_path.read_bytes()
        with PILImage.open(io.BytesIO(data), formats=("JPEG",)) as opened:
            width, height = opened.size
            if opened.mode not in ("RGB", "L") or not 0 < width * height <= max_pixels:
                return fallback(job)
            exif = read_exif(opened)
    except Exception:  # not a JPEG, or a damaged one: the CPU path says why
        return fallback(job)
    digest = job.known_hash or hashlib.blake2b(data, digest_size=16).hexdigest()
    if exif.orientation in (5, 6, 7, 8):
        width, height = height, width
    return _JpegRead(job, digest, data, width, height, exif)


def resized_on_device(pixels: torch.Tensor, orientation: int | None, steps: PixelSteps) -> Any:
    """A decoded (3, H, W) uint8 photo turned upright, then resized and cropped as `steps`
    say, on the tensor's device: the (H, W, 3) uint8 array the encoder takes. Bicubic with
    antialiasing, as PIL's; values may differ from PIL's by a level or two."""
    import torch
    import torch.nn.functional as nnf

    image = _upright(pixels, orientation)
    for step in steps.steps:
        height, width = image.shape[-2:]
        if step[0] in ("resize_short", "resize"):
            if step[0] == "resize_short":
                side, max_size = step[1], step[2]
                short, long = (width, height) if width <= height else (height, width)
                new_short, new_long = side, int(side * long / short)
                if max_size is not None and new_long > max_size:
                    new_short, new_long = int(max_size * new_short / new_long), max_size
                size = (new_long, new_short) if width <= height else (new_short, new_long)
            else:
                size = (step[1], step[2])
            if size != (height, width):
                scaled = nnf.interpolate(
                    image[None].float(), size=size, mode="bicubic", antialias=True
                )
                image = scaled[0].round_().clamp_(0, 255).to(torch.uint8)
        elif step[0] == "center_crop":
            crop_h, crop_w = step[1], step[2]
            if crop_w > width or crop_h > height:
                left, top = max(0, (crop_w - width) // 2), max(0, (crop_h - height) // 2)
                right = max(0, (crop_w - width + 1) // 2)
                bottom = max(0, (crop_h - height + 1) // 2)
                image = nnf.pad(image, (left, right, top, bottom))
                height, width = image.shape[-2:]
            top, left = int(round((height - crop_h) / 2.0)), int(round((width - crop_w) / 2.0))
            image = image[:, top : top + crop_h, left : left + crop_w]
    return image.permute(1, 2, 0).contiguous().cpu().numpy()


def _upright(pixels: torch.Tensor, orientation: int | None) -> torch.Tensor:
    """The (3, H, W) photo turned as its EXIF orientation says (as `decode._oriented`)."""
    if orientation in (2, 4):  # mirrored left-right, or top-bottom
        return pixels.flip(-1 if orientation == 2 else -2)
    if orientation == 3:
        return pixels.flip(-1).flip(-2)
    if orientation in (5, 6, 7, 8):
        turned = pixels.transpose(-1, -2)  # 5: transposed
        if orientation == 6:
            return turned.flip(-1)  # a quarter turn clockwise
        if orientation == 7:
            return turned.flip(-1).flip(-2)
        if orientation == 8:
            return turned.flip(-2)  # a quarter turn anticlockwise
        return turned
    return pixels


def gpu_prepared_stream(
    jobs: list[Job],
    decode_jpeg: Callable[..., Any],
    device: str,
    steps: PixelSteps,
    fallback: Callable[[Job], Prepared | Failed],
    workers: int,
    batch_size: int,
    cancel: CancelToken,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> Generator[Prepared | Failed, None, None]:
    """`prepared_stream`'s records, plain JPEGs decoded `batch_size` at a time on `device`
    by `decode_jpeg` (read, hashed and their EXIF parsed in `workers` threads); every other
    photo, and each photo of a batch the GPU refused, prepared on the CPU by `fallback` (with
    its skip reason when it cannot be used). Closing the stream stops the threads."""
    from torchvision.io import ImageReadMode

    def decode_batch(reads: list[_JpegRead | Prepared | Failed]) -> list[Prepared | Failed]:
        jpegs = [r for r in reads if isinstance(r, _JpegRead)]
        pixels: dict[int, Any] = {}
        if jpegs:
            import torch

            data = [torch.frombuffer(bytearray(r.data), dtype=torch.uint8) for r in jpegs]
            try:
                decoded = decode_jpeg(data, device=device, mode=ImageReadMode.RGB)
                for read, image in zip(jpegs, decoded, strict=True):
                    pixels[id(read)] = resized_on_device(image, read.exif.orientation, steps)
            except Exception as exc:  # one damaged JPEG fails the batch: the CPU sorts it out
                log.debug("a GPU decode batch failed (%s): decoding it on the CPU", exc)
                pixels.clear()
        out: list[Prepared | Failed] = []
        for r in reads:
            if not isinstance(r, _JpegRead):
                out.append(r)
            elif id(r) in pixels:
                out.append(
                    Prepared(r.job, r.content_hash, r.width, r.height, r.exif, pixels[id(r)])
                )
            else:
                out.append(fallback(r.job))
        return out

    pool = ThreadPoolExecutor(workers, thread_name_prefix="quadrat-read")
    try:
        chunks: deque[list[Future[_JpegRead | Prepared | Failed]]] = deque()
        starts = iter(range(0, len(jobs), batch_size))
        for start in itertools.islice(starts, 2):  # the next batch is read while one decodes
            part = jobs[start : start + batch_size]
            chunks.append([pool.submit(_read_jpeg, job, max_pixels, fallback) for job in part])
        while chunks:
            reads = [future.result() for future in chunks.popleft()]
            following = next(starts, None)
            if following is not None:
                part = jobs[following : following + batch_size]
                chunks.append([pool.submit(_read_jpeg, job, max_pixels, fallback) for job in part])
            cancel.check()
            yield from decode_batch(reads)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
