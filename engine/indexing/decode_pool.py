"""Reading photos for an encoder (`read_photo`), and doing it in worker processes.

Threads decode in parallel (Pillow releases the GIL while it decodes), but hashing, EXIF and the
Python around each photo still take the GIL: on a 16-core GPU machine indexing was bound by
decoding in threads (about 600 photos/s), and 16 decode processes reached 1,900. In
`decoded_in_processes` each worker process hashes, decodes, resizes and crops its photos and
writes the pixels into its slot of one shared-memory block; only the small rest (hash, size,
EXIF) travels through its pipe. The parent copies the pixels out and frees the slot at once.

- In photo order, with at most `ahead` photos in flight or waiting, as the thread stream.
- Cancellable: waiting polls the cancel token every 0.1 s; closing stops the workers (killed
  after half a second), so Cancel answers within about a second.
- Crash-safe: a worker that dies (killed, out of memory, a decoder crash) is replaced and its
  unfinished photos are decoded again; a photo being decoded when two workers died is skipped
  with a reason, as a corrupt file is.
- Torch-free workers: the encoder's resize and crop are replayed as plain PIL steps
  (`PixelSteps`), translated from its transform and checked equal to it on probe images; an
  encoder whose transform does not translate is decoded in threads.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from PIL import Image

from engine.errors import BadImageError, QuadratError
from engine.indexing.decode import (
    DEFAULT_DECODE_MEMORY,
    DecodeBudget,
    DecodedImage,
    decode_image,
)
from engine.indexing.exif import ExifInfo
from engine.indexing.hashes import content_hash
from engine.progress import CancelToken

log = logging.getLogger(__name__)

T = TypeVar("T")

# How photos are decoded for indexing: "auto" picks processes on 4 or more cores (see
# `processes_by_default`), "threads" and "processes" force one; "gpu" decodes JPEGs on the
# encoder's CUDA device (`pipeline.gpu_prepared_stream`), else as "auto".
DECODE_MODES = ("auto", "threads", "processes", "gpu")
# On a near-quiet 2-core machine processes indexed at 0.85-0.94 of threads (docs/BENCHMARKS.md,
# "Decoding in processes"; a fresh interpreter per worker takes time to start, and two cores
# leave no idle one to gain): below this many cores "auto" keeps threads.
MIN_CORES_FOR_PROCESSES = 4

_POLL_SECONDS = 0.1  # how often a wait for a worker looks at the cancel token
_STOP_GRACE_SECONDS = 0.5  # a worker still busy this long after being asked to stop is killed
_DEATHS_PER_PHOTO = 2  # a photo being decoded when this many workers died is skipped
_DEATHS_WITHOUT_PROGRESS = 4  # workers dying this often with no photo done: give up, in a line
CRASHED_DECODER = "the decoder crashed on this file (its worker process died)"


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


# --------------------------------------------------------------------------------------------
# The encoder's resize and crop without torch


@dataclass(frozen=True)
class PixelSteps:
    """An encoder's PIL resize and crop as plain data a worker process replays without torch:
    ("resize_short", side, max_size, resample), ("resize", height, width, resample),
    ("center_crop", height, width), ("rgb",), ("convert", mode). Called on a PIL image it returns the uint8
    (H, W, 3) array the encoder's `preprocess` returns."""

    steps: tuple[tuple[Any, ...], ...]

    def __call__(self, image: Image.Image) -> np.ndarray:
        image = image.convert("RGB")
        for step in self.steps:
            if step[0] == "resize_short":
                image = _resize_short(image, step[1], step[2], step[3])
            elif step[0] == "resize":
                if image.size != (step[2], step[1]):
                    image = image.resize((step[2], step[1]), step[3])
            elif step[0] == "center_crop":
                image = _center_crop(image, step[1], step[2])
            elif step[0] == "convert":
                image = image.convert(step[1])
            else:
                image = image.convert("RGB")
        return np.asarray(image.convert("RGB"), dtype=np.uint8)

    def output_bytes(self) -> int:
        """The bytes of one photo's pixels once resized and cropped (of a large landscape
        photo, when the steps keep its proportions)."""
        return int(self(Image.new("RGB", (_PROBE_SIZES[-1]))).nbytes)


def _resize_short(
    image: Image.Image, side: int, max_size: int | None, resample: int
) -> Image.Image:
    """torchvision's `Resize(side)` of a PIL image: the short side to `side`, the long side
    truncated in proportion (then capped at `max_size`)."""
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = side, int(side * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    size = (new_short, new_long) if width <= height else (new_long, new_short)
    return image if size == image.size else image.resize(size, resample)


def _center_crop(image: Image.Image, height: int, width: int) -> Image.Image:
    """torchvision's `CenterCrop((height, width))` of a PIL image, black padding included."""
    image_width, image_height = image.size
    if width > image_width or height > image_height:
        left = (width - image_width) // 2 if width > image_width else 0
        top = (height - image_height) // 2 if height > image_height else 0
        right = (width - image_width + 1) // 2 if width > image_width else 0
        bottom = (height - image_height + 1) // 2 if height > image_height else 0
        padded = Image.new(image.mode, (image_width + left + right, image_height + top + bottom))
        padded.paste(image, (left, top))
        image, (image_width, image_height) = padded, padded.size
        if (image_width, image_height) == (width, height):
            return image
    top = int(round((image_height - height) / 2.0))
    left = int(round((image_width - width) / 2.0))
    return image.crop((left, top, left + width, top + height))


# Probe sizes: landscape, portrait, smaller than the crop (padded) and odd sides (rounding).
_PROBE_SIZES = ((301, 207), (207, 301), (120, 90), (641, 479))


def pixel_steps_of(encoder: Any) -> PixelSteps | None:
    """The encoder's resize and crop as `PixelSteps`, or None when its transform has a step
    that does not translate or the translation differs from `encoder.preprocess` on any probe
    image by a single value (the photos are then decoded in threads)."""
    raw = getattr(encoder, "pil_steps", None)
    if raw is None:
        return None
    try:
        from torchvision.transforms import (  # type: ignore[import-untyped]
            CenterCrop,
            Resize,
            functional,
        )
    except ImportError:
        return None
    steps: list[tuple[Any, ...]] = []
    for step in raw:
        # Exact types: subclasses (open_clip's ResizeKeepRatio) resize otherwise.
        if type(step) is Resize:
            size = [step.size] if isinstance(step.size, int) else list(step.size)
            resample = int(functional.pil_modes_mapping[step.interpolation])
            if len(size) == 1:
                steps.append(("resize_short", int(size[0]), step.max_size, resample))
            else:
                steps.append(("resize", int(size[0]), int(size[1]), resample))
        elif type(step) is CenterCrop:
            steps.append(("center_crop", int(step.size[0]), int(step.size[1])))
        elif getattr(step, "__name__", "") == "_convert_to_rgb":
            steps.append(("rgb",))
        elif type(step).__name__ == "MaybeConvertMode":  # open_clip's convert of PIL images
            steps.append(("convert", str(getattr(step, "mode", "RGB"))))
        else:
            log.info("decoding in threads: the model's transform has a step %r", step)
            return None
    translated = PixelSteps(tuple(steps))
    rng = np.random.default_rng(0)
    for width, height in _PROBE_SIZES:
        probe = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        expected = encoder.preprocess(probe)
        if not isinstance(expected, np.ndarray) or not np.array_equal(expected, translated(probe)):
            log.info("decoding in threads: the model's resize differs from its translation")
            return None
    return translated


def processes_by_default() -> bool:
    """Whether "auto" decodes in processes here: on 4 or more cores, where they can start."""
    return (os.cpu_count() or 1) >= MIN_CORES_FOR_PROCESSES and processes_available()


# --------------------------------------------------------------------------------------------
# The worker processes


@dataclass(frozen=True)
class DecodedPixels:
    """A photo read in a worker: its hash, full size, EXIF and the encoder's pixels."""

    content_hash: str
    width: int
    height: int
    exif: ExifInfo
    pixels: np.ndarray


def _worker_main() -> None:
    """A worker process (started by `_ProcessPool._start`): its pipes' and pixel block's file
    descriptors come in its arguments, its settings as the first message. Reads (index, slot,
    path, known hash) tasks until None or the parent is gone, and answers each photo with its
    failure or its details, its pixels written into `slot` of the block (sent along only when
    they do not fit)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the parent's to handle
    tasks_fd, answers_fd, memory_fd = (int(arg) for arg in sys.argv[1:4])
    tasks, answers = Connection(tasks_fd, writable=False), Connection(answers_fd, readable=False)
    slot_bytes, steps, min_side, decode_memory = tasks.recv()
    memory = mmap.mmap(memory_fd, 0)
    budget = DecodeBudget(decode_memory)
    while True:
        try:
            task = tasks.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if task is None:
            return
        for index, slot, path, known_hash in task:
            read = read_photo(Path(path), known_hash, min_side, steps, budget)
            if isinstance(read, PhotoFailure):
                answers.send((index, read))
                continue
            digest, decoded, pixels = read
            extra: np.ndarray | None = pixels
            if pixels.nbytes <= slot_bytes:
                start = slot * slot_bytes
                memory[start : start + pixels.nbytes] = np.ascontiguousarray(pixels).data
                extra = None
            answer = (digest, decoded.width, decoded.height, decoded.exif, pixels.shape)
            answers.send((index, answer, extra))


def _pixel_block(size: int) -> int:
    """A file descriptor of `size` bytes of memory that worker processes map: anonymous, so
    nothing is left behind whoever dies (a named shared-memory block outlives a killed run)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("quadrat-decode", os.MFD_CLOEXEC)
    else:
        with tempfile.TemporaryFile(prefix="quadrat-decode-") as handle:  # gone from the folder
            fd = os.dup(handle.fileno())
    os.ftruncate(fd, size)
    return fd


_WORKER_CODE = "from engine.indexing.decode_pool import _worker_main; _worker_main()"


def processes_available() -> bool:
    """Whether decode worker processes can start here: a POSIX system (they get their pipes
    as inherited descriptors) running as Python (a frozen build has no `-c` to start them)."""
    return os.name == "posix" and bool(sys.executable) and not getattr(sys, "frozen", False)


@dataclass(eq=False)  # compared by identity
class _Worker:
    process: subprocess.Popen[bytes]
    tasks: Connection
    answers: Connection
    assigned: deque[int] = field(default_factory=deque)  # photo indices sent, in order


_live_pools: weakref.WeakSet[_ProcessPool] = weakref.WeakSet()


def worker_pids() -> list[int]:
    """The process ids of the decode workers running now (for tests and diagnostics)."""
    return [w.process.pid for pool in list(_live_pools) for w in pool.workers]


class _ProcessPool:
    """Worker processes sharing one block of pixel slots; see the module's notes."""

    def __init__(
        self,
        workers: int,
        steps: PixelSteps,
        min_side: int | None,
        ahead: int,
        slot_bytes: int,
        decode_memory: int,
    ) -> None:
        self._steps, self._min_side = steps, min_side
        self._ahead = max(ahead, workers)
        self._slot_bytes = max(1, slot_bytes)
        # A worker's photos go in chunks: fewer messages, while each worker keeps a second
        # chunk queued so it never waits for the parent.
        self._chunk = max(1, min(8, self._ahead // (2 * workers)))
        self._decode_memory = max(1, decode_memory // workers)
        self._memory_fd = _pixel_block(self._ahead * self._slot_bytes)
        self._memory = mmap.mmap(self._memory_fd, 0)
        self._free_slots = list(range(self._ahead))
        self._slot_of: dict[int, int] = {}
        self.workers: list[_Worker] = []
        self._deaths = Counter[int]()  # photo index -> workers that died decoding it
        self._deaths_in_a_row = 0
        _live_pools.add(self)
        try:
            for _ in range(workers):
                self.workers.append(self._start())
        except BaseException:
            self.close()
            raise

    def _start(self) -> _Worker:
        """Start a worker: a fresh interpreter importing only this module's needs (forking
        a process with Qt, torch or SQLite threads is unsafe; multiprocessing's spawn would
        import the main module again in every worker)."""
        tasks_read, tasks_write = os.pipe()
        answers_read, answers_write = os.pipe()
        handed = (tasks_read, answers_write, self._memory_fd)
        engine_parent = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [engine_parent, env.get("PYTHONPATH")]))
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, *map(str, handed)],
                pass_fds=handed,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            os.close(tasks_write)
            os.close(answers_read)
            raise
        finally:
            os.close(tasks_read)  # the worker's ends: its own copies are what it uses
            os.close(answers_write)
        worker = _Worker(
            process,
            Connection(tasks_write, readable=False),
            Connection(answers_read, writable=False),
        )
        settings = (self._slot_bytes, self._steps, self._min_side, self._decode_memory)
        with contextlib.suppress(OSError):  # a worker dead at once is seen when answers close
            worker.tasks.send(settings)
        return worker

    def results(
        self, photos: Sequence[tuple[Path, str | None]], cancel: CancelToken
    ) -> Generator[DecodedPixels | PhotoFailure, None, None]:
        """What each photo became, in order."""
        pending: deque[int] = deque(range(len(photos)))
        done: dict[int, DecodedPixels | PhotoFailure] = {}
        next_out = 0
        while next_out < len(photos):
            cancel.check()
            self._hand_out(photos, pending, done)
            if next_out in done:
                yield done.pop(next_out)
                next_out += 1
                continue
            self._receive(pending, done)

    def _hand_out(
        self,
        photos: Sequence[tuple[Path, str | None]],
        pending: deque[int],
        done: dict[int, Any],
    ) -> None:
        """Send chunks of pending photos to workers with room, while slots last."""
        for worker in self.workers:
            while pending and len(worker.assigned) < 2 * self._chunk:
                room = self._ahead - len(self._slot_of) - len(done)
                count = min(self._chunk, room, len(pending))
                if count <= 0:
                    return
                task = []
                for _ in range(count):
                    index = pending.popleft()
                    slot = self._free_slots.pop()
                    self._slot_of[index] = slot
                    worker.assigned.append(index)
                    path, known_hash = photos[index]
                    task.append((index, slot, str(path), known_hash))
                try:
                    worker.tasks.send(task)
                except OSError:  # it died: _receive sees its answers close, hands these out again
                    break

    def _receive(self, pending: deque[int], done: dict[int, Any]) -> None:
        """Wait up to a poll interval for answers; replace workers that died (their answer
        pipe closes when they do, however they die)."""
        by_answers = {worker.answers: worker for worker in self.workers}
        for answers in wait(list(by_answers), timeout=_POLL_SECONDS):
            worker = by_answers[answers]  # type: ignore[index]
            if not self._drain(worker, done):
                self._replace(worker, pending, done)

    def _drain(self, worker: _Worker, done: dict[int, Any]) -> bool:
        """Take every answer waiting in the worker's pipe; False when the pipe is closed."""
        try:
            while worker.answers.poll():
                self._take(worker, worker.answers.recv(), done)
        except (EOFError, OSError):
            return False
        return True

    def _take(self, worker: _Worker, message: tuple[Any, ...], done: dict[int, Any]) -> None:
        index, answer = message[0], message[1]
        worker.assigned.remove(index)
        slot = self._slot_of.pop(index)
        self._deaths_in_a_row = 0
        if isinstance(answer, PhotoFailure):
            done[index] = answer
        else:
            digest, width, height, exif, shape = answer
            pixels = message[2]
            if pixels is None:
                count = int(np.prod(shape))
                start = slot * self._slot_bytes
                # A copy: the slot is reused at once.
                pixels = np.frombuffer(self._memory, np.uint8, count, start).reshape(shape).copy()
            done[index] = DecodedPixels(digest, width, height, exif, pixels)
        self._free_slots.append(slot)

    def _replace(self, worker: _Worker, pending: deque[int], done: dict[int, Any]) -> None:
        """A worker died: start another; decode its unfinished photos again, except one that
        was being decoded when workers died `_DEATHS_PER_PHOTO` times (skipped)."""
        exit_code = _stopped(worker)
        log.warning(
            "a decode worker process died (exit code %s); its photos are decoded again", exit_code
        )
        unfinished = list(worker.assigned)
        for index in unfinished:
            self._free_slots.append(self._slot_of.pop(index))
        if unfinished:
            crashed = unfinished[0]  # a worker answers its photos in order
            self._deaths[crashed] += 1
            if self._deaths[crashed] >= _DEATHS_PER_PHOTO:
                done[crashed] = PhotoFailure(CRASHED_DECODER, None)
                unfinished = unfinished[1:]
        pending.extendleft(reversed(unfinished))
        self._deaths_in_a_row += 1
        if self._deaths_in_a_row > _DEATHS_WITHOUT_PROGRESS:
            raise QuadratError(
                "decode worker processes keep dying before any photo is done "
                f"(exit code {exit_code}); index with --decode threads"
            )
        self.workers[self.workers.index(worker)] = self._start()

    def close(self, grace: float = _STOP_GRACE_SECONDS) -> None:
        """Stop the workers (killed when still busy after `grace` seconds) and free the block."""
        for worker in self.workers:
            with contextlib.suppress(OSError):
                worker.tasks.send(None)
        deadline = time.monotonic() + grace
        for worker in self.workers:
            _stopped(worker, max(0.0, deadline - time.monotonic()))
        self.workers = []
        _live_pools.discard(self)
        self._memory.close()
        os.close(self._memory_fd)


def _stopped(worker: _Worker, grace: float = 0.0) -> int | None:
    """Wait up to `grace` seconds for the worker to end, then kill it; close its pipes.
    Returns its exit code (negative: the signal that ended it)."""
    try:
        worker.process.wait(grace)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(1.0)
    worker.tasks.close()
    worker.answers.close()
    return worker.process.returncode


def decoded_in_processes(
    photos: Sequence[tuple[Path, str | None]],
    steps: PixelSteps,
    min_side: int | None,
    workers: int,
    ahead: int,
    cancel: CancelToken,
    *,
    slot_bytes: int,
    decode_memory: int = DEFAULT_DECODE_MEMORY,
) -> Generator[DecodedPixels | PhotoFailure, None, None]:
    """Read each (path, known content hash) photo in `workers` processes: what it became, in
    order, with at most `ahead` photos in flight or waiting. `slot_bytes`: the pixels of one
    photo as `steps` return them (larger ones travel through the pipe); `decode_memory` is
    shared out between the workers. Closing the stream stops the workers."""
    pool = _ProcessPool(workers, steps, min_side, ahead, slot_bytes, decode_memory)
    try:
        yield from pool.results(photos, cancel)
    finally:
        # After Cancel nothing a busy worker decodes is wanted (the next run does the photo
        # again): kill it now rather than wait out the grace, so Cancel answers at once.
        pool.close(0.0 if cancel.cancelled else _STOP_GRACE_SECONDS)
