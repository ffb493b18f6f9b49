"""GPU benchmarks and checks (run on demand, on a machine with CUDA):

    python tests/bench/bench_gpu.py check       # the shipped cuda path against the CPU encoder
    python tests/bench/bench_gpu.py throughput  # Indexer vs bare forward, batch sizes x workers
    python tests/bench/bench_gpu.py text        # one-query text encoding latency
    python tests/bench/bench_gpu.py breakdown   # where the Indexer's time goes (parts removed)
    python tests/bench/bench_gpu.py pipeline    # decode threads / processes / GPU (nvJPEG)

`check` loads the demo model and a random-weight ViT-B-32 saved as safetensors and loaded as
`ViT-B-32:/path/file.safetensors` (how a user's local checkpoint is loaded) through
`engine.models.encoders.load_encoder` on the device and on the CPU, and checks that fp16 autocast is
used on cuda, that image and text vectors come back float32 and L2-normalised, and that they
agree with the CPU encoder's (cosine per vector). It also indexes a small folder on the device
and compares the stored vectors with the CPU encoder's.

`throughput` writes a folder of JPEGs and times, for ViT-B-32 (random weights: speed does not
depend on them): the bare forward pass (`model.encode_image` on normalised tensors already on
the GPU, under the encoder's fp16 autocast), `encode_preprocessed` on the uint8 arrays the
decode threads produce (adds stacking, normalising and the host-to-device copy), decode only
(hash + decode + resize in a thread pool, what the Indexer's workers do), and the whole
`Indexer.run`, for each batch size and worker count, runs alternating, median reported.

`breakdown` times decode pools (threads against processes), each step of
`encode_preprocessed`, a variant that normalises on the GPU, and the Indexer with decoding and/or
encoding taken away. Results: docs/BENCHMARKS.md, "Indexing and search on a GPU".

`pipeline` times, for each decode mode of `Indexer(decode=...)` (threads, worker processes,
JPEGs on the GPU through nvJPEG), the decode stage alone and the whole `Indexer.run`, with the
bare `encode_preprocessed` beside them (ViT-B-32, the largest `--batches`, the most
`--workers`); the GPU mode reads "nan" where nvJPEG is not available.

Each command prints Markdown tables; `--json FILE` also writes the raw numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.catalog.library import Library  # noqa: E402
from engine.indexing.decode import decode_image  # noqa: E402
from engine.indexing.hashes import content_hash  # noqa: E402
from engine.indexing.indexer import Indexer  # noqa: E402
from engine.models.encoders import load_encoder  # noqa: E402

QUERIES = [
    "a photo of a red fox in the snow",
    "",
    "moss",
    "a close-up photo of the underside of a fern frond showing sori, taken in a wet forest "
    "in the early morning light after rain, with droplets on the leaves " * 3,  # truncated
    "Amanita muscaria",
    "two ducks",
]


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def write_photos(folder: Path, count: int, size: tuple[int, int], seed: int = 0) -> list[Path]:
    """JPEGs of `size` in 20 subfolders (the same pattern as bench_indexing), written by a
    thread pool."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    shifts = rng.integers(0, 128, (count, 3), dtype=np.uint8)
    for sub in range(20):
        (folder / f"sub{sub:02d}").mkdir(parents=True, exist_ok=True)

    def one(i: int) -> Path:
        arr = np.roll(base, i * 7, axis=1) // 2 + shifts[i]
        path = folder / f"sub{i % 20:02d}" / f"photo_{i:06d}.jpg"
        Image.fromarray(arr).save(path, quality=85)
        return path

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        return list(pool.map(one, range(count)))


def natural_images(count: int, seed: int) -> list[Image.Image]:
    """Smooth random images of varied sizes and aspect ratios (not white noise)."""
    rng = np.random.default_rng(seed)
    images = []
    for i in range(count):
        w, h = [(500, 375), (375, 500), (224, 224), (640, 200), (97, 131)][i % 5]
        small = rng.integers(0, 255, (max(2, h // 32), max(2, w // 32), 3), dtype=np.uint8)
        image = Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC)
        noise = rng.integers(-20, 20, (h, w, 3))
        images.append(Image.fromarray(np.clip(np.asarray(image) + noise, 0, 255).astype(np.uint8)))
    return images


def random_checkpoint(arch: str, out: Path) -> str:
    import open_clip
    from safetensors.torch import save_file

    model = open_clip.create_model(arch, pretrained=None)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out))
    return f"{arch}:{out}"


def _vector_report(vectors: np.ndarray, dim: int) -> dict[str, Any]:
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    return {
        "dtype": str(vectors.dtype),
        "shape": list(vectors.shape),
        "finite": bool(np.isfinite(vectors).all()),
        "max_norm_err": float(np.abs(norms - 1).max()),
        "dim_ok": vectors.shape[1] == dim,
        "contiguous": bool(vectors.flags["C_CONTIGUOUS"]),
    }


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (a64 * b64).sum(1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))


@contextlib.contextmanager
def _record_compute_dtypes(model: Any, seen: dict[str, int]):
    """Count the output dtypes of every Linear/Conv2d forward inside the block, and whether
    autocast was on while they ran."""
    import torch

    def hook(module: Any, inputs: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            on = torch.is_autocast_enabled(output.device.type)
            key = f"{output.dtype}|autocast={on}"
            seen[key] = seen.get(key, 0) + 1

    handles = [
        m.register_forward_hook(hook)
        for m in model.modules()
        if isinstance(m, torch.nn.Linear | torch.nn.Conv2d)
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def check_one(spec: str, label: str, device: str, tmp: Path) -> dict[str, Any]:
    import torch

    dev = load_encoder(spec, device=device)
    cpu = load_encoder(spec, device="cpu")
    out: dict[str, Any] = {"model": label, "device_str": dev.device, "dim": dev.dim}
    out["same_model_key"] = dev.model_key == cpu.model_key
    out["param_dtypes"] = sorted({str(p.dtype) for p in dev.model.parameters()})
    out["param_devices"] = sorted({str(p.device) for p in dev.model.parameters()})

    images = natural_images(40, seed=11)
    seen_img: dict[str, int] = {}
    with _record_compute_dtypes(dev.model, seen_img):
        img_dev = dev.encode_images(images)
    seen_txt: dict[str, int] = {}
    with _record_compute_dtypes(dev.model, seen_txt):
        txt_dev = dev.encode_texts(QUERIES)
    out["image_layer_dtypes"] = seen_img
    out["text_layer_dtypes"] = seen_txt
    img_cpu = cpu.encode_images(images)
    txt_cpu = cpu.encode_texts(QUERIES)
    out["image_vectors"] = _vector_report(img_dev, dev.dim)
    out["text_vectors"] = _vector_report(txt_dev, dev.dim)
    ci, ct = _cosines(img_dev, img_cpu), _cosines(txt_dev, txt_cpu)
    out["image_cos_vs_cpu_min"] = float(ci.min())
    out["image_cos_vs_cpu_mean"] = float(ci.mean())
    out["text_cos_vs_cpu_min"] = float(ct.min())
    out["text_cos_vs_cpu_mean"] = float(ct.mean())

    # The same on the device without autocast (fp32): separates fp16 error from anything else.
    saved = dev._autocast
    dev._autocast = contextlib.nullcontext()
    try:
        img32 = dev.encode_images(images)
        txt32 = dev.encode_texts(QUERIES)
    finally:
        dev._autocast = saved
    out["fp32_device_image_cos_vs_cpu_min"] = float(_cosines(img32, img_cpu).min())
    out["fp32_device_text_cos_vs_cpu_min"] = float(_cosines(txt32, txt_cpu).min())

    # Batch composition must not change a vector (beyond fp16 rounding).
    alone = np.concatenate([dev.encode_images([im]) for im in images[:8]])
    out["image_cos_alone_vs_batched_min"] = float(_cosines(alone, img_dev[:8]).min())

    # Rank agreement: nearest text for each image on device vs CPU (random weights, so only
    # the agreement matters, not which text).
    out["top1_text_agree"] = float(
        np.mean((img_dev @ txt_dev.T).argmax(1) == (img_cpu @ txt_cpu.T).argmax(1))
    )

    # The whole Indexer on the device: stored vectors against the CPU encoder's.
    from sqlalchemy import select

    from engine.catalog import Image as ImageRow

    folder = tmp / f"check-photos-{label.split()[0]}"
    write_photos(folder, 96, (500, 375), seed=5)
    with Library.open(tmp / f"check-lib-{label.split()[0]}") as lib:
        report = Indexer(lib, dev, batch_size=32).run(folder)
        ids, stored = lib.load_vectors(dev.model_key)
        with lib.catalog.session() as s:
            paths = dict(s.execute(select(ImageRow.id, ImageRow.rel_path)).all())
        index = lib.vector_index(dev.model_key, dim=dev.dim)
        self_hits = [
            index.search(v, 1)[0][0] == i for i, v in zip(ids[:16], stored[:16], strict=True)
        ]
    min_side = getattr(dev, "image_size", None)
    ref = cpu.encode_preprocessed(
        [cpu.preprocess(decode_image(folder / paths[int(i)], min_side=min_side).image) for i in ids]
    )
    out["indexer"] = {
        "indexed": report.indexed,
        "skipped": len(report.skipped),
        "stored": _vector_report(stored, dev.dim),
        "cos_vs_cpu_min": float(_cosines(stored, ref).min()),
        "self_top1": float(np.mean(self_hits)),
    }

    # One-query text latency on the CPU of this machine, for comparison with `text`.
    times = []
    for _ in range(23):
        started = time.perf_counter()
        cpu.encode_texts([QUERIES[0]])
        times.append(time.perf_counter() - started)
    out["cpu_text_ms_median"] = statistics.median(times[3:]) * 1000
    out["cpu_threads"] = torch.get_num_threads()
    return out


def cmd_check(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    results = []
    specs = [("demo", "demo (tiny)")]
    if args.arch:
        specs.append((random_checkpoint(args.arch, tmp / "random.safetensors"), args.arch))
    for spec, label in specs:
        try:
            r = check_one(spec, label, args.device, tmp)
        except Exception as error:  # report and go on to the next model
            import traceback

            traceback.print_exc()
            r = {"model": label, "error": repr(error)}
        print(json.dumps(r, indent=1), flush=True)
        results.append(r)
    print()
    print(
        "| model | layer outputs (image / text) | img cos vs CPU min/mean | txt cos vs CPU min/mean "
        "| fp32-on-device img/txt cos min | max norm err | indexer stored cos min |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        if "error" in r:
            print(f"| {r['model']} | ERROR {r['error']} | | | | | |")
            continue
        print(
            f"| {r['model']} | {list(r['image_layer_dtypes'])} / {list(r['text_layer_dtypes'])} "
            f"| {r['image_cos_vs_cpu_min']:.5f} / {r['image_cos_vs_cpu_mean']:.5f} "
            f"| {r['text_cos_vs_cpu_min']:.5f} / {r['text_cos_vs_cpu_mean']:.5f} "
            f"| {r['fp32_device_image_cos_vs_cpu_min']:.6f} / "
            f"{r['fp32_device_text_cos_vs_cpu_min']:.6f} "
            f"| {max(r['image_vectors']['max_norm_err'], r['text_vectors']['max_norm_err']):.1e} "
            f"| {r['indexer']['cos_vs_cpu_min']:.5f} |"
        )
    return {"check": results}


# ---------------------------------------------------------------------------------------------
# Throughput


class _GpuSampler:
    """Samples GPU utilisation (NVML) in a thread while a block runs."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            self._nvml = None

    def __enter__(self) -> _GpuSampler:
        self.samples = []
        self._stop.clear()
        if self._handle is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._handle is not None:
            self._thread.join()

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.samples)) if self.samples else None


class _TimedIndexer(Indexer):
    """The product's Indexer, with the main thread's time in encoding and committing summed."""

    encode_s = 0.0
    commit_s = 0.0

    def _commit(self, *a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        try:
            return super()._commit(*a, **k)
        finally:
            self.commit_s += time.perf_counter() - started


def _prepare_like_worker(encoder: Any, path: Path) -> Any:
    """What an Indexer worker does per new photo: hash, decode (reduced-scale draft), preprocess."""
    content_hash(path)
    decoded = decode_image(path, min_side=getattr(encoder, "image_size", None))
    return encoder.preprocess(decoded.image)


def cmd_throughput(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import torch

    device = args.device
    spec = random_checkpoint(args.arch, tmp / "tp.safetensors")
    encoder = load_encoder(spec, device=device)
    folder = tmp / "photos"
    started = time.perf_counter()
    paths = write_photos(folder, args.photos, (500, 375), seed=0)
    print(f"wrote {len(paths)} photos in {time.perf_counter() - started:.1f} s", flush=True)
    raw: dict[str, Any] = {"device": device, "arch": args.arch, "photos": len(paths)}

    # Decode only: the workers' share of the work, per worker count.
    decode: dict[int, list[float]] = {w: [] for w in args.workers}
    arrays: list[Any] = []
    for _rep in range(args.reps):
        for w in args.workers:
            with ThreadPoolExecutor(w) as pool:
                list(pool.map(lambda p: _prepare_like_worker(encoder, p), paths[:32]))
                started = time.perf_counter()
                arrays = list(pool.map(lambda p: _prepare_like_worker(encoder, p), paths))
                decode[w].append(len(paths) / (time.perf_counter() - started))
    raw["decode_img_s"] = decode
    print(f"decode only img/s: {decode}", flush=True)

    # Bare forward: normalised tensors already on the device, fp16 autocast as the encoder does.
    mean, std = encoder._mean, encoder._std
    on_device = []
    for i in range(0, len(arrays), 256):
        chunk = torch.from_numpy(np.stack(arrays[i : i + 256])).to(device)
        chunk = chunk.permute(0, 3, 1, 2).float().div(255.0)
        on_device.append((chunk - mean.to(device)) / std.to(device))
    pixels = torch.cat(on_device)
    del on_device
    bare: dict[int, list[float]] = {b: [] for b in args.batches}
    host: dict[int, list[float]] = {b: [] for b in args.batches}
    with torch.inference_mode(), encoder._autocast:
        for b in args.batches:  # warm-up (cuDNN/cuBLAS choices per shape)
            for _ in range(3):
                encoder.model.encode_image(pixels[:b])
        _sync(device)
    encoder.encode_preprocessed(arrays[:64])
    sampler = _GpuSampler()
    util: dict[str, Any] = {}
    for _rep in range(args.reps):
        for b in args.batches:
            with sampler, torch.inference_mode(), encoder._autocast:
                _sync(device)
                started = time.perf_counter()
                for i in range(0, len(pixels), b):
                    encoder.model.encode_image(pixels[i : i + b])
                _sync(device)
                bare[b].append(len(pixels) / (time.perf_counter() - started))
            util[f"bare_b{b}"] = sampler.mean
            with sampler:
                started = time.perf_counter()
                for i in range(0, len(arrays), b):
                    encoder.encode_preprocessed(arrays[i : i + b])
                host[b].append(len(arrays) / (time.perf_counter() - started))
            util[f"encode_preprocessed_b{b}"] = sampler.mean
    raw["bare_img_s"] = bare
    raw["encode_preprocessed_img_s"] = host
    print(f"bare img/s: {bare}\nencode_preprocessed img/s: {host}", flush=True)
    del pixels

    # The whole pipeline, a fresh library per run, configurations alternating.
    pipe: dict[str, list[float]] = {}
    parts: dict[str, list[dict[str, float]]] = {}
    run_no = 0
    real_encode = encoder.encode_preprocessed
    for rep in range(args.reps):
        for b in args.batches:
            for w in args.workers:
                key = f"b{b}_w{w}"
                run_no += 1
                timer = {"encode": 0.0}

                def timed(batch: Any, _t: dict = timer) -> Any:
                    started = time.perf_counter()
                    try:
                        return real_encode(batch)
                    finally:
                        _t["encode"] += time.perf_counter() - started

                encoder.encode_preprocessed = timed  # instance attribute shadows the method
                try:
                    with Library.open(tmp / f"lib-{run_no}") as lib, sampler:
                        indexer = _TimedIndexer(lib, encoder, batch_size=b, workers=w)
                        started = time.perf_counter()
                        report = indexer.run(folder)
                        wall = time.perf_counter() - started
                finally:
                    del encoder.encode_preprocessed
                assert report.indexed == len(paths), report.summary()
                pipe.setdefault(key, []).append(report.indexed / wall)
                parts.setdefault(key, []).append(
                    {
                        "wall_s": wall,
                        "encode_s": timer["encode"],
                        "commit_s": indexer.commit_s,
                        "gpu_util": sampler.mean or -1,
                    }
                )
                print(
                    f"pipeline {key} rep {rep}: {report.indexed / wall:.0f} img/s, "
                    f"wall {wall:.2f} s, encode {timer['encode']:.2f} s, "
                    f"commit {indexer.commit_s:.2f} s, gpu util {sampler.mean}",
                    flush=True,
                )
    raw["pipeline_img_s"] = pipe
    raw["pipeline_parts"] = parts
    raw["gpu_util"] = util
    if device.startswith("cuda"):
        raw["max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / 1e9

    med = statistics.median
    print()
    print(f"{args.arch}, {len(paths)} JPEGs 500x375, device {device}, medians of {args.reps}")
    print("| stage | batch | img/s |")
    print("| --- | ---: | ---: |")
    for b in args.batches:
        print(f"| bare forward (on-device tensors, fp16 autocast) | {b} | {med(bare[b]):.0f} |")
    for b in args.batches:
        print(f"| encode_preprocessed (uint8 host arrays) | {b} | {med(host[b]):.0f} |")
    for w in args.workers:
        print(f"| decode only (hash+decode+resize), {w} threads | – | {med(decode[w]):.0f} |")
    print()
    print(
        "| batch | workers | pipeline img/s | ÷ bare | ÷ decode-only | main thread in encode "
        "| in commit | GPU util % |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for b in args.batches:
        for w in args.workers:
            key = f"b{b}_w{w}"
            p = med(pipe[key])
            enc = med(x["encode_s"] / x["wall_s"] for x in parts[key])
            com = med(x["commit_s"] / x["wall_s"] for x in parts[key])
            gpu = med(x["gpu_util"] for x in parts[key])
            print(
                f"| {b} | {w} | {p:.0f} | {p / med(bare[b]):.3f} | {p / med(decode[w]):.2f} "
                f"| {enc:.0%} | {com:.0%} | {gpu:.0f} |"
            )
    return {"throughput": raw}


def cmd_text(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    specs = [("demo", "demo (tiny)")]
    if args.arch:
        specs.append((random_checkpoint(args.arch, tmp / "text.safetensors"), args.arch))
    rows = []
    for spec, label in specs:
        started = time.perf_counter()
        encoder = load_encoder(spec, device=args.device)
        _sync(args.device)
        load_s = time.perf_counter() - started
        for _ in range(10):
            encoder.encode_texts([QUERIES[0]])
        times = []
        for i in range(200):
            query = QUERIES[i % len(QUERIES)] or "x"
            started = time.perf_counter()
            encoder.encode_texts([query])
            times.append(time.perf_counter() - started)
        ms = np.asarray(times) * 1000
        rows.append(
            {
                "model": label,
                "load_s": load_s,
                "median_ms": float(np.median(ms)),
                "p95_ms": float(np.percentile(ms, 95)),
                "min_ms": float(ms.min()),
            }
        )
    print()
    print("| model | device | load s (first, incl. CUDA init) | one query median ms | p95 ms |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['model']} | {args.device} | {r['load_s']:.2f} | {r['median_ms']:.2f} "
            f"| {r['p95_ms']:.2f} |"
        )
    return {"text": rows}


# ---------------------------------------------------------------------------------------------
# Where the pipeline's time goes


def _plain_worker(path: Path) -> int:
    """hash + decode + resize + crop to 224, PIL only (picklable, for a process pool too)."""
    content_hash(path)
    image = decode_image(path, min_side=224).image
    w, h = image.size
    scale = 224 / min(w, h)
    image = image.resize((round(w * scale), round(h * scale)), Image.Resampling.BICUBIC)
    left, top = (image.size[0] - 224) // 2, (image.size[1] - 224) // 2
    return int(np.asarray(image.crop((left, top, left + 224, top + 224))).shape[0])


def _gpu_normalising_encode(encoder: Any):
    """`encode_preprocessed` with the uint8 batch copied to the device first and scaled and
    normalised there (a quarter of the bytes over PCIe, no float work on the CPU)."""
    import torch

    from engine.models.encoders import _normalised

    mean = encoder._mean.to(encoder.device)
    std = encoder._std.to(encoder.device)

    def encode(batch: Any) -> np.ndarray:
        pixels = torch.from_numpy(np.stack(batch)).to(encoder.device)
        pixels = pixels.permute(0, 3, 1, 2).float().div_(255.0).sub_(mean).div_(std)
        with torch.inference_mode(), encoder._autocast:
            return _normalised(encoder.model.encode_image(pixels))

    return encode


class _EncoderProxy:
    """The real encoder, with `encode_preprocessed` replaced."""

    def __init__(self, real: Any, encode: Any) -> None:
        self._real = real
        self.encode_preprocessed = encode

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _CachedPrepareIndexer(_TimedIndexer):
    """Workers return the photo's earlier `_prepare` result: no hashing or decoding."""

    cache: dict[str, Any] = {}

    def _prepare(self, job: Any) -> Any:
        key = str(job.entry.abs_path)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = super()._prepare(job)
        return type(hit)(job, *[getattr(hit, f) for f in list(vars(hit))[1:]])


def cmd_breakdown(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import torch

    from engine.models.encoders import _normalised

    device = args.device
    encoder = load_encoder(random_checkpoint(args.arch, tmp / "bd.safetensors"), device=device)
    folder = tmp / "photos"
    paths = write_photos(folder, args.photos, (500, 375), seed=0)
    raw: dict[str, Any] = {"torch_threads": torch.get_num_threads()}
    med = statistics.median

    # 1. Decode scaling: threads against processes, on a subset.
    from concurrent.futures import ProcessPoolExecutor

    subset = paths[:600]
    scaling: dict[str, list[float]] = {}
    for _rep in range(2):
        for label, cls, n in (
            ("1 thread", ThreadPoolExecutor, 1),
            ("4 threads", ThreadPoolExecutor, 4),
            ("8 threads", ThreadPoolExecutor, 8),
            ("16 threads", ThreadPoolExecutor, 16),
            ("4 processes", ProcessPoolExecutor, 4),
            ("16 processes", ProcessPoolExecutor, 16),
        ):
            with cls(n) as pool:
                list(pool.map(_plain_worker, subset[:32]))
                started = time.perf_counter()
                list(
                    pool.map(
                        _plain_worker, subset, chunksize=8 if cls is ProcessPoolExecutor else 1
                    )
                )
                scaling.setdefault(label, []).append(len(subset) / (time.perf_counter() - started))
    raw["decode_scaling"] = scaling
    print(f"decode scaling img/s: {scaling}", flush=True)
    one = {}
    for label, fn in (
        ("hash", content_hash),
        ("decode", lambda p: decode_image(p, min_side=224)),
        ("decode+preprocess", lambda p: encoder.preprocess(decode_image(p, min_side=224).image)),
    ):
        started = time.perf_counter()
        for p in subset[:300]:
            fn(p)
        one[label] = (time.perf_counter() - started) / 300 * 1000
    raw["serial_ms_per_photo"] = one
    print(f"serial ms/photo: {one}", flush=True)

    # 2. encode_preprocessed, step by step, batch 256 (and 128).
    with ThreadPoolExecutor(16) as pool:
        arrays = list(pool.map(lambda p: _prepare_like_worker(encoder, p), paths))
    gpu_encode = _gpu_normalising_encode(encoder)
    ref = encoder.encode_preprocessed(arrays[:256])
    alt = gpu_encode(arrays[:256])
    raw["gpu_norm_cos_vs_engine_min"] = float(_cosines(alt, ref).min())
    mean, std = encoder._mean, encoder._std
    steps_out: dict[int, dict[str, float]] = {}
    for b in (128, 256):
        steps: dict[str, list[float]] = {}
        for _rep in range(3):
            for i in range(0, len(arrays) - b + 1, b):
                batch = arrays[i : i + b]
                t0 = time.perf_counter()
                stacked = np.stack(batch)
                t1 = time.perf_counter()
                pixels = torch.from_numpy(stacked).permute(0, 3, 1, 2).float().div(255.0)
                pixels = (pixels - mean) / std
                t2 = time.perf_counter()
                on_dev = pixels.to(device)
                _sync(device)
                t3 = time.perf_counter()
                with torch.inference_mode(), encoder._autocast:
                    feats = encoder.model.encode_image(on_dev)
                _sync(device)
                t4 = time.perf_counter()
                _normalised(feats)
                t5 = time.perf_counter()
                encoder.encode_preprocessed(batch)
                t6 = time.perf_counter()
                gpu_encode(batch)
                t7 = time.perf_counter()
                for k, v in (
                    ("np.stack", t1 - t0),
                    ("cpu float+normalise", t2 - t1),
                    ("H2D float32", t3 - t2),
                    ("forward fp16", t4 - t3),
                    ("normalise+D2H", t5 - t4),
                    ("engine encode_preprocessed", t6 - t5),
                    ("uint8 H2D + normalise on GPU", t7 - t6),
                ):
                    steps.setdefault(k, []).append(v * 1000)
        steps_out[b] = {k: med(v) for k, v in steps.items()}
    raw["encode_steps_ms"] = steps_out
    print(f"encode steps ms per batch: {json.dumps(steps_out, indent=1)}", flush=True)

    # 3. The Indexer with parts taken away (alternating, fresh library each run).
    fake = np.random.default_rng(0).standard_normal((512, encoder.dim)).astype(np.float32)
    fake /= np.linalg.norm(fake, axis=1, keepdims=True)

    def no_encode(batch: Any) -> np.ndarray:
        return fake[: len(batch)].copy()

    variants = {
        "real": (lambda: encoder, _TimedIndexer),
        "GPU normalise": (lambda: _EncoderProxy(encoder, gpu_encode), _TimedIndexer),
        "no encode": (lambda: _EncoderProxy(encoder, no_encode), _TimedIndexer),
        "no decode": (lambda: encoder, _CachedPrepareIndexer),
        "no decode, GPU normalise": (
            lambda: _EncoderProxy(encoder, gpu_encode),
            _CachedPrepareIndexer,
        ),
        "no decode, no encode": (
            lambda: _EncoderProxy(encoder, no_encode),
            _CachedPrepareIndexer,
        ),
    }
    # Fill the prepare cache once (untimed).
    with Library.open(tmp / "lib-fill") as lib:
        _CachedPrepareIndexer(lib, _EncoderProxy(encoder, no_encode), workers=16).run(folder)
    pipe: dict[str, list[dict[str, float]]] = {}
    run_no = 0
    b = 256
    for _rep in range(args.reps):
        for name, (make, cls) in variants.items():
            for w in args.workers:
                run_no += 1
                enc = make()
                with Library.open(tmp / f"blib-{run_no}") as lib:
                    indexer = cls(lib, enc, batch_size=b, workers=w)
                    started = time.perf_counter()
                    report = indexer.run(folder)
                    wall = time.perf_counter() - started
                assert report.indexed == len(paths), report.summary()
                row = {"img_s": report.indexed / wall, "commit_s": indexer.commit_s, "wall": wall}
                pipe.setdefault(f"{name}|{w}", []).append(row)
                print(f"{name} w{w}: {row}", flush=True)
    raw["pipeline_variants"] = pipe

    # 4. One text query: the tokenizer's share.
    tok = []
    for _ in range(100):
        started = time.perf_counter()
        encoder._tokenizer(["a photo of a red fox in the snow"])
        tok.append(time.perf_counter() - started)
    raw["tokenize_ms"] = med(tok) * 1000

    print()
    print(f"{args.arch}, device {device}, batch {b}, torch threads {raw['torch_threads']}")
    print("| decode pool (hash+decode+resize+crop, 600 JPEGs) | img/s |")
    print("| --- | ---: |")
    for k, v in scaling.items():
        print(f"| {k} | {med(v):.0f} |")
    print()
    print("| encode_preprocessed step | ms / batch of 128 | ms / batch of 256 |")
    print("| --- | ---: | ---: |")
    for k in steps_out[256]:
        print(f"| {k} | {steps_out[128][k]:.1f} | {steps_out[256][k]:.1f} |")
    print()
    print("| Indexer variant (batch 256) | workers | img/s | commit s (of wall s) |")
    print("| --- | ---: | ---: | --- |")
    for key, rows in pipe.items():
        name, w = key.split("|")
        print(
            f"| {name} | {w} | {med(r['img_s'] for r in rows):.0f} "
            f"| {med(r['commit_s'] for r in rows):.2f} of {med(r['wall'] for r in rows):.2f} |"
        )
    print(f"\ntokenize one query: {raw['tokenize_ms']:.2f} ms; serial ms/photo: {one}")
    print(f"GPU-normalise vectors vs engine's: min cosine {raw['gpu_norm_cos_vs_engine_min']:.6f}")
    return {"breakdown": raw}


def _decode_only(mode: str, encoder: Any, jobs: list, workers: int, batch: int) -> float:
    """Photos/s of the Indexer's decode stage alone in `mode` (threads, processes, gpu)."""
    from engine.indexing.decode_pool import pixel_steps_of
    from engine.indexing.pipeline import (
        gpu_jpeg_decoder,
        gpu_prepared_stream,
        prepare,
        prepared_stream,
        process_prepared_stream,
    )
    from engine.progress import CancelToken

    steps = pixel_steps_of(encoder)
    assert steps is not None, "the model's resize does not translate"
    side = encoder.image_size

    def on_cpu(job: Any) -> Any:
        return prepare(job, side, encoder.preprocess)

    started = time.perf_counter()
    if mode == "threads":
        stream = prepared_stream(jobs, on_cpu, workers, batch * 3, CancelToken())
    elif mode == "processes":
        stream = process_prepared_stream(
            jobs, steps, side, workers, batch * 3, CancelToken(), slot_bytes=steps.output_bytes()
        )
    else:
        decoder = gpu_jpeg_decoder(encoder.device)
        if decoder is None:
            return float("nan")
        stream = gpu_prepared_stream(
            jobs, decoder, encoder.device, steps, on_cpu, workers, batch, CancelToken()
        )
    done = sum(1 for _ in stream)
    _sync(encoder.device)
    return done / (time.perf_counter() - started)


def cmd_pipeline(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Decode only, encode only and the whole Indexer for each decode mode (threads,
    processes, gpu), ViT-B-32 on 500x375 JPEGs, alternating, median of `--reps`."""
    from engine.indexing.plan import Job
    from engine.indexing.walk import FileEntry

    device = args.device
    encoder = load_encoder(random_checkpoint(args.arch, tmp / "pl.safetensors"), device=device)
    folder = tmp / "pipeline"
    paths = write_photos(folder, args.photos, (500, 375), seed=5)
    jobs = [Job(FileEntry(p.name, p, p.stat().st_size, 0), None) for p in paths]
    batch = args.batches[-1]
    workers = max(args.workers)
    side = encoder.image_size
    pixels = [encoder.preprocess(decode_image(p, min_side=side).image) for p in paths[: batch * 4]]
    modes = ("threads", "processes", "gpu")
    raw: dict[str, list[float]] = {}
    for rep in range(args.reps):
        encoder.encode_preprocessed(pixels[:batch])
        _sync(device)
        started = time.perf_counter()
        for i in range(0, len(pixels), batch):
            encoder.encode_preprocessed(pixels[i : i + batch])
        _sync(device)
        raw.setdefault("encode only", []).append(len(pixels) / (time.perf_counter() - started))
        for mode in modes if rep % 2 == 0 else tuple(reversed(modes)):
            rate = _decode_only(mode, encoder, jobs, workers, batch)
            raw.setdefault(f"decode only, {mode}", []).append(rate)
            with Library.open(tmp / f"lib-{mode}-{rep}") as lib:
                indexer = Indexer(lib, encoder, batch_size=batch, workers=workers, decode=mode)
                started = time.perf_counter()
                report = indexer.run(folder)
                rate = report.indexed / (time.perf_counter() - started)
            raw.setdefault(f"pipeline, {mode}", []).append(rate)
    print(
        f"{args.arch}, device {device}, batch {batch}, {workers} decode workers, "
        f"{args.photos} photos 500x375, {os.cpu_count()} cores, median of {args.reps}"
    )
    print("| stage | img/s | runs |")
    print("| --- | --- | --- |")
    for what, values in raw.items():
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"| {what} | {statistics.median(values):.0f} | {runs} |")
    return {"device": device, "batch": batch, "workers": workers, "raw": raw}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["check", "throughput", "text", "breakdown", "pipeline"])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--arch", default="ViT-B-32", help="'' to skip the CLIP-size model")
    parser.add_argument("--photos", type=int, default=2000)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    commands = {
        "check": cmd_check,
        "throughput": cmd_throughput,
        "text": cmd_text,
        "breakdown": cmd_breakdown,
        "pipeline": cmd_pipeline,
    }
    with tempfile.TemporaryDirectory() as tmpdir:
        result = commands[args.command](args, Path(tmpdir))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
