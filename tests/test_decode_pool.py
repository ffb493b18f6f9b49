"""Decoding in worker processes: the same rows and vectors as threads, Cancel within a second,
a killed worker losing nothing, and the resize workers replay equal to the model's own."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from engine.catalog import Embedding, Image
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.indexing.indexer import Indexer
from engine.progress import CancelToken, Progress

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)


def add_bad_files(folder: Path) -> dict[str, str]:
    """Unusable files: rel_path -> a word their skip reason must contain."""
    bad = folder / "bad"
    bad.mkdir()
    (bad / "empty.jpg").write_bytes(b"")
    (bad / "notes.jpg").write_text("this is not a photo")
    PILImage.new("RGB", (64, 64), (200, 30, 30)).save(bad / "whole.jpg", quality=90)
    data = (bad / "whole.jpg").read_bytes()
    (bad / "whole.jpg").unlink()
    (bad / "truncated.jpg").write_bytes(data[: len(data) // 2])
    return {"bad/empty.jpg": "empty", "bad/notes.jpg": "image", "bad/truncated.jpg": "trunc"}


def add_large_photos(folder: Path, count: int) -> None:
    """Photos that take a while to decode, so a run is still busy when it is cancelled."""
    rng = np.random.default_rng(3)
    big = folder / "large"
    big.mkdir()
    for i in range(count):
        pixels = rng.integers(0, 256, (900, 1200, 3), dtype=np.uint8)
        PILImage.fromarray(pixels).save(big / f"large_{i:03d}.png", compress_level=1)


def catalog_rows(library: Library, model_key: str) -> dict[str, tuple[object, ...]]:
    """rel_path -> what the catalog holds of the photo, its vector included."""
    with library.catalog.session() as s:
        vectors = dict(
            s.execute(
                select(Embedding.image_id, Embedding.vector).where(Embedding.model_key == model_key)
            ).all()
        )
        rows = {}
        for img in s.scalars(select(Image)):
            vector = vectors.get(img.id)
            rows[img.rel_path] = (
                img.status,
                img.skip_reason,
                img.width,
                img.height,
                img.content_hash,
                img.observed_at,
                img.latitude,
                img.longitude,
                None if vector is None else np.frombuffer(vector, dtype="<f4").tolist(),
            )
    return rows


def decode_workers() -> list[int]:
    from engine.indexing.decode_pool import worker_pids

    return worker_pids()


def pixel_steps_of(encoder):
    from engine.indexing.decode_pool import pixel_steps_of as translated

    return translated(encoder)


def test_processes_store_the_same_rows_and_vectors_as_threads(
    photos, tmp_path, demo_encoder, small_demo_collection
):
    reasons = add_bad_files(photos)
    reports, rows = {}, {}
    for mode in ("threads", "processes", "gpu"):  # no GPU here: "gpu" decodes on the CPU
        with Library.open(tmp_path / mode) as library:
            reports[mode] = Indexer(library, demo_encoder, batch_size=8, decode=mode).run(photos)
            rows[mode] = catalog_rows(library, demo_encoder.model_key)
    n = small_demo_collection.image_count
    assert reports["processes"].indexed == reports["threads"].indexed == n
    assert rows["processes"] == rows["threads"]
    assert rows["gpu"] == rows["threads"]
    for rel_path, word in reasons.items():
        status, reason = rows["processes"][rel_path][:2]
        assert status == "skipped" and word in reason.lower(), (rel_path, reason)
    assert decode_workers() == []  # the run's processes are gone with it


def test_cancel_stops_the_decode_processes_and_the_next_run_finishes(
    photos, tmp_path, demo_encoder, small_demo_collection
):
    add_large_photos(photos, 8)
    token = CancelToken()
    cancelled_at: list[int] = []

    def cancel_midway(p: Progress) -> None:
        if p.message == "indexing" and p.done >= 16 and not cancelled_at:
            cancelled_at.append(p.done)
            token.cancel()

    with Library.open(tmp_path / "lib") as library:
        indexer = Indexer(library, demo_encoder, batch_size=4, workers=2, decode="processes")
        report = indexer.run(photos, progress=cancel_midway, cancel=token)
        # How fast it answers is a benchmark (tests/bench/bench_responsiveness.py).
        assert report.cancelled and report.indexed < small_demo_collection.image_count + 8
        assert decode_workers() == []
        again = Indexer(library, demo_encoder, decode="processes").run(photos)
        assert report.indexed + again.indexed == small_demo_collection.image_count + 8


def test_a_killed_worker_loses_no_photo(photos, tmp_path, demo_encoder, small_demo_collection):
    add_large_photos(photos, 6)
    killed: list[int] = []

    def kill_a_worker(p: Progress) -> None:
        if p.message == "indexing" and p.done >= 8 and not killed:
            worker = decode_workers()[0]
            os.kill(worker, signal.SIGKILL)  # as the out-of-memory killer would
            killed.append(worker)

    with Library.open(tmp_path / "lib") as library:
        indexer = Indexer(library, demo_encoder, batch_size=4, workers=2, decode="processes")
        report = indexer.run(photos, progress=kill_a_worker)
        assert killed
        assert report.indexed == small_demo_collection.image_count + 6 and not report.skipped
        rows = catalog_rows(library, demo_encoder.model_key)
        assert all(row[0] == "ok" and row[-1] is not None for row in rows.values())


def test_an_encoder_workers_cannot_replay_is_decoded_in_threads(
    photos, tmp_path, demo_encoder, small_demo_collection
):
    class OwnResize:
        """An encoder with a resize of its own (no PIL steps to hand to a worker)."""

        def __init__(self, inner) -> None:
            self.inner = inner
            self.model_key, self.spec = inner.model_key, inner.spec
            self.dim, self.device = inner.dim, inner.device
            self.threads: set[str] = set()

        def preprocess(self, image):
            self.threads.add(threading.current_thread().name)
            return self.inner.preprocess(image)

        def encode_preprocessed(self, batch):
            return self.inner.encode_preprocessed(batch)

    encoder = OwnResize(demo_encoder)
    assert pixel_steps_of(encoder) is None
    with Library.open(tmp_path / "lib") as library:
        report = Indexer(library, encoder, decode="processes").run(photos)  # type: ignore[arg-type]
    assert report.indexed == small_demo_collection.image_count
    assert any(name.startswith("quadrat-decode") for name in encoder.threads)


def test_the_worker_resize_equals_the_model_transform_at_224():
    import open_clip

    transform = open_clip.image_transform(224, is_train=False)
    steps = list(transform.transforms[:-2])  # all but to-tensor and normalise

    class Encoder:
        pil_steps = steps

        @staticmethod
        def preprocess(image):
            for step in steps:
                image = step(image)
            return np.asarray(image.convert("RGB"), dtype=np.uint8)

    translated = pixel_steps_of(Encoder())
    assert translated is not None
    rng = np.random.default_rng(1)
    for width, height in ((500, 375), (375, 500), (225, 224), (100, 700)):
        photo = PILImage.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        assert np.array_equal(translated(photo), Encoder.preprocess(photo))
        assert translated(photo).shape == (224, 224, 3)


def test_an_unknown_decode_mode_is_refused(library, demo_encoder):
    with pytest.raises(BadInputError, match="threads, processes"):
        Indexer(library, demo_encoder, decode="gpu-please")


@pytest.fixture
def library(tmp_path: Path):
    with Library.open(tmp_path / "library") as lib:
        yield lib


def test_the_encoder_keeps_encoding_while_a_checkpoint_is_written(
    photos, tmp_path, demo_encoder, small_demo_collection
):
    """Checkpoints are written off the encoder's path: a slow commit (a busy disk) and the
    encoding of the next photos happen at the same time."""
    writing = threading.Event()
    encoded_while_writing: list[int] = []

    class Watching:
        def __init__(self, inner) -> None:
            self.inner = inner
            self.model_key, self.spec = inner.model_key, inner.spec
            self.dim, self.device = inner.dim, inner.device

        def preprocess(self, image):
            return self.inner.preprocess(image)

        def encode_preprocessed(self, batch):
            if writing.is_set():
                encoded_while_writing.append(len(batch))
            return self.inner.encode_preprocessed(batch)

    class SlowDisk(Indexer):
        def _commit(self, *args, **kwargs):
            writing.set()
            try:
                time.sleep(0.3)
                return super()._commit(*args, **kwargs)
            finally:
                writing.clear()

    with Library.open(tmp_path / "lib") as library:
        encoder = Watching(demo_encoder)
        indexer = SlowDisk(library, encoder, batch_size=4, checkpoint_every=8)  # type: ignore[arg-type]
        report = indexer.run(photos)
        n = small_demo_collection.image_count
        assert report.indexed == n
        assert sum(encoded_while_writing) >= 8
        rows = catalog_rows(library, demo_encoder.model_key)
        assert sum(1 for row in rows.values() if row[-1] is not None) == n


def oriented_photos(folder: Path) -> list[Path]:
    """A lopsided JPEG (a bright corner, a gradient) under each EXIF orientation, a PNG and a
    truncated JPEG."""
    folder.mkdir()
    y, x = np.mgrid[0:240, 0:320]
    pixels = np.stack([x * 255 // 320, y * 255 // 240, (x + y) % 256], axis=-1).astype(np.uint8)
    pixels[:60, :80] = (255, 255, 0)
    paths = []
    for orientation in range(1, 9):
        exif = PILImage.Exif()
        exif[0x0112] = orientation
        path = folder / f"turned_{orientation}.jpg"
        PILImage.fromarray(pixels).save(path, quality=95, exif=exif.tobytes())
        paths.append(path)
    PILImage.fromarray(pixels).save(folder / "flat.png")
    paths.append(folder / "flat.png")
    data = paths[0].read_bytes()
    (folder / "cut.jpg").write_bytes(data[: len(data) // 2])
    paths.append(folder / "cut.jpg")
    return paths


def test_the_gpu_decode_path_matches_the_cpu_path_when_run_on_the_cpu(tmp_path, demo_encoder):
    """The GPU stream's own steps (reading, batching, orientation, resize and crop, falling
    back for other files) run here with torchvision's CPU JPEG decoder in nvJPEG's place."""
    from torchvision.io import decode_jpeg

    from engine.indexing.pipeline import (
        Failed,
        gpu_jpeg_decoder,
        gpu_prepared_stream,
        prepare,
    )
    from engine.indexing.plan import Job
    from engine.indexing.walk import FileEntry

    assert gpu_jpeg_decoder("cpu") is None  # no GPU: the Indexer decodes on the CPU
    paths = oriented_photos(tmp_path / "turned")
    jobs = [Job(FileEntry(p.name, p, p.stat().st_size, 0), None) for p in paths]
    steps = pixel_steps_of(demo_encoder)
    assert steps is not None

    def on_cpu(job):
        return prepare(job, demo_encoder.image_size, demo_encoder.preprocess)

    stream = gpu_prepared_stream(jobs, decode_jpeg, "cpu", steps, on_cpu, 2, 3, CancelToken())
    for job, got in zip(jobs, stream, strict=True):
        want = on_cpu(job)
        assert type(got) is type(want), job.entry.rel_path
        if isinstance(want, Failed):
            assert got.reason == want.reason
            continue
        assert (got.content_hash, got.width, got.height) == (
            want.content_hash,
            want.width,
            want.height,
        )
        assert got.exif == want.exif
        difference = np.abs(got.tensor.astype(int) - want.tensor.astype(int))
        assert got.tensor.shape == want.tensor.shape
        assert difference.mean() < 3, (job.entry.rel_path, difference.mean())


def test_torch_encodes_on_one_thread_on_two_cores(monkeypatch):
    from engine.models.encoders import cpu_encoder_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert cpu_encoder_threads() == 1
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert cpu_encoder_threads() == 12
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_encoder_threads() == 3
