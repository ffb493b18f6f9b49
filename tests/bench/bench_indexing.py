"""Indexing benchmarks (run on demand): `python tests/bench/bench_indexing.py`.

1. Full pipeline (scan, hash, decode in threads, preprocess, encode, commit) against the bare
   model forward pass on the same, already preprocessed images — same model, same run.
2. Unchanged re-index of a 10,000-photo folder.
3. `--modes`: threads against processes (`Indexer(decode=...)`, engine/indexing/decode_pool.py)
   on the same 500x375 JPEGs, alternating, median of `--rounds`: decode only (hash, decode,
   resize and crop, in job order, as the Indexer's decode stage), encode only (the model's
   forward on the same pixels, whatever decodes them) and the whole pipeline.
4. `--torch-threads`: the encoder's forward at 1 and 2 torch threads, alternating, with the
   load average before and after (the default in engine/models/encoders.py came from it).

Prints a Markdown table. Models use random weights: speed does not depend on the weights.
`--device cuda` runs the encoders on the GPU (`--batch` sets the batch size of both the bare
forward pass and the Indexer); tests/bench/bench_gpu.py has the fuller GPU measurements.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.catalog.library import Library  # noqa: E402
from engine.indexing.decode import decode_image  # noqa: E402
from engine.indexing.indexer import Indexer  # noqa: E402
from engine.models.encoders import load_encoder  # noqa: E402


def write_photos(folder: Path, count: int, size: tuple[int, int], seed: int = 0) -> list[Path]:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    base = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    for i in range(count):
        arr = np.roll(base, i * 7, axis=1) // 2 + rng.integers(0, 128, 3, dtype=np.uint8)
        path = folder / f"sub{i % 20:02d}" / f"photo_{i:06d}.jpg"
        path.parent.mkdir(exist_ok=True)
        Image.fromarray(arr).save(path, quality=85)
        paths.append(path)
    return paths


def random_checkpoint(arch: str, out: Path) -> str:
    import open_clip
    from safetensors.torch import save_file

    model = open_clip.create_model(arch)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out))
    return f"{arch}:{out}"


def bench_pipeline(
    spec: str,
    label: str,
    photos: int,
    size: tuple[int, int],
    tmp: Path,
    device: str = "cpu",
    batch: int = 32,
) -> dict:
    encoder = load_encoder(spec, device=device)
    folder = tmp / f"photos-{label}"
    paths = write_photos(folder, photos, size)

    tensors = [encoder.preprocess(decode_image(p).image) for p in paths]
    encoder.encode_preprocessed(tensors[:batch])  # warm-up
    started = time.perf_counter()
    for i in range(0, len(tensors), batch):
        encoder.encode_preprocessed(tensors[i : i + batch])
    bare = len(tensors) / (time.perf_counter() - started)

    with Library.open(tmp / f"lib-{label}") as lib:
        started = time.perf_counter()
        report = Indexer(lib, encoder, batch_size=batch).run(folder)
        pipeline = report.indexed / (time.perf_counter() - started)
    return {
        "model": label,
        "photos": photos,
        "size": f"{size[0]}x{size[1]}",
        "bare": bare,
        "pipeline": pipeline,
    }


def _decode_and_resize(path: Path) -> int:
    """What a decode worker does per photo (the model's resize included), as a plain function
    that a process pool can run too."""
    decoded = decode_image(path, min_side=224)
    image = decoded.image.resize((224, 224), Image.Resampling.BICUBIC)
    return int(np.asarray(image).shape[0])


def bench_decode_pools(photos: int, tmp: Path) -> list[tuple[str, float]]:
    """Decode throughput of the worker-pool choices, on the same 500x375 JPEGs."""
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    paths = write_photos(tmp / "decode", photos, (500, 375), seed=2)
    rows = []
    started = time.perf_counter()
    for path in paths:
        _decode_and_resize(path)
    rows.append(("serial", photos / (time.perf_counter() - started)))
    for label, pool_class in (
        ("2 threads", ThreadPoolExecutor),
        ("2 processes", ProcessPoolExecutor),
    ):
        with pool_class(2) as pool:
            list(pool.map(_decode_and_resize, paths[:8]))  # start-up outside the timing
            started = time.perf_counter()
            list(
                pool.map(_decode_and_resize, paths, chunksize=16)
                if "process" in label
                else pool.map(_decode_and_resize, paths)
            )
            rows.append((label, photos / (time.perf_counter() - started)))
    return rows


def _jobs(paths: list[Path]) -> list:
    from engine.indexing.plan import Job
    from engine.indexing.walk import FileEntry

    return [Job(FileEntry(p.name, p, p.stat().st_size, 0), None) for p in paths]


def _decode_rate(mode: str, encoder, jobs: list, workers: int, ahead: int) -> float:
    """Photos/s of the Indexer's decode stage alone, in `mode`."""
    from engine.indexing.decode_pool import pixel_steps_of
    from engine.indexing.pipeline import prepare, prepared_stream, process_prepared_stream
    from engine.progress import CancelToken

    steps = pixel_steps_of(encoder)
    assert steps is not None, "the model's resize does not translate for worker processes"
    side = encoder.image_size
    started = time.perf_counter()
    if mode == "threads":
        stream = prepared_stream(
            jobs, lambda job: prepare(job, side, encoder.preprocess), workers, ahead, CancelToken()
        )
    else:
        stream = process_prepared_stream(
            jobs, steps, side, workers, ahead, CancelToken(), slot_bytes=steps.output_bytes()
        )
    done = sum(1 for _ in stream)
    return done / (time.perf_counter() - started)


def bench_modes(
    spec: str, label: str, photos: int, tmp: Path, rounds: int, batch: int, workers: int
) -> list[dict]:
    """Decode only, encode only and the pipeline, threads against processes (alternating)."""
    import statistics

    encoder = load_encoder(spec, device="cpu")
    folder = tmp / f"modes-{label}"
    paths = write_photos(folder, photos, (500, 375), seed=3)
    jobs = _jobs(paths)
    pixels = [encoder.preprocess(decode_image(p, min_side=encoder.image_size).image) for p in paths]
    encoder.encode_preprocessed(pixels[:batch])  # warm-up
    rates: dict[str, list[float]] = {}
    for round_ in range(rounds):
        started = time.perf_counter()
        for i in range(0, len(pixels), batch):
            encoder.encode_preprocessed(pixels[i : i + batch])
        rates.setdefault("encode", []).append(len(pixels) / (time.perf_counter() - started))
        for mode in ("threads", "processes") if round_ % 2 == 0 else ("processes", "threads"):
            rate = _decode_rate(mode, encoder, jobs, workers, batch * 3)
            rates.setdefault(f"decode {mode}", []).append(rate)
            with Library.open(tmp / f"lib-{label}-{mode}-{round_}") as lib:
                indexer = Indexer(lib, encoder, batch_size=batch, workers=workers, decode=mode)
                started = time.perf_counter()
                report = indexer.run(folder)
                rate = report.indexed / (time.perf_counter() - started)
            rates.setdefault(f"pipeline {mode}", []).append(rate)
    return [
        {"model": label, "what": what, "rate": statistics.median(values), "all": values}
        for what, values in rates.items()
    ]


def bench_torch_threads(spec: str, label: str, photos: int, rounds: int, batch: int) -> dict:
    """The encoder's forward, photos/s at 1 and 2 torch threads (alternating, median)."""
    import statistics

    import torch

    encoder = load_encoder(spec, device="cpu")
    rng = np.random.default_rng(4)
    side = encoder.image_size
    pixels = [rng.integers(0, 256, (side, side, 3), dtype=np.uint8) for _ in range(photos)]
    rates: dict[int, list[float]] = {1: [], 2: []}
    load_before = os.getloadavg()[0]
    for round_ in range(rounds):
        for threads in (1, 2) if round_ % 2 == 0 else (2, 1):
            torch.set_num_threads(threads)
            encoder.encode_preprocessed(pixels[:batch])  # warm-up at this thread count
            started = time.perf_counter()
            for i in range(0, photos, batch):
                encoder.encode_preprocessed(pixels[i : i + batch])
            rates[threads].append(photos / (time.perf_counter() - started))
    return {
        "model": label,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "rates": {t: statistics.median(v) for t, v in rates.items()},
        "all": rates,
    }


def bench_unchanged(count: int, tmp: Path, device: str = "cpu") -> dict:
    encoder = load_encoder("demo", device=device)
    folder = tmp / "ten-thousand"
    write_photos(folder, count, (64, 64), seed=1)
    with Library.open(tmp / "lib-unchanged") as lib:
        started = time.perf_counter()
        first = Indexer(lib, encoder, batch_size=64).run(folder)
        first_s = time.perf_counter() - started
    with Library.open(tmp / "lib-unchanged") as lib:
        started = time.perf_counter()
        again = Indexer(lib, encoder).run(folder)
        again_s = time.perf_counter() - started
    assert again.indexed == 0 and again.unchanged == first.indexed
    return {"photos": count, "first_s": first_s, "unchanged_s": again_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--photos", type=int, default=256)
    parser.add_argument("--unchanged", type=int, default=10_000)
    parser.add_argument("--decode-only", action="store_true", help="only the decode pool table")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto")
    parser.add_argument("--batch", type=int, default=32, help="encoder batch size")
    parser.add_argument("--modes", action="store_true", help="threads against processes")
    parser.add_argument("--torch-threads", action="store_true", help="1 against 2 threads")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (--modes)")
    parser.add_argument("--workers", type=int, default=2, help="decode threads or processes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        if args.modes or args.torch_threads:
            print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start")
            vit = random_checkpoint("ViT-B-32", tmp / "vitb32.safetensors")
        if args.torch_threads:
            print("| model | load before / after | 1 thread img/s | 2 threads img/s | 2 / 1 |")
            print("| --- | --- | --- | --- | --- |")
            for spec, label, count in ((vit, "ViT-B-32", 64), ("demo", "demo (tiny)", 512)):
                r = bench_torch_threads(spec, label, count, args.rounds, args.batch)
                one, two = r["rates"][1], r["rates"][2]
                print(
                    f"| {label} | {r['load_before']:.1f} / {r['load_after']:.1f} | {one:.1f} | "
                    f"{two:.1f} | {two / one:.2f} |"
                )
        if args.modes:
            print(f"batch {args.batch}, {args.workers} workers, median of {args.rounds} rounds")
            print(
                "| model | photos | stage | threads img/s | processes img/s | processes / threads |"
            )
            print("| --- | --- | --- | --- | --- | --- |")
            for spec, label, count in (
                (vit, "ViT-B-32", args.photos // 2),
                ("demo", "demo (tiny)", args.photos * 4),
            ):
                rows = {
                    r["what"]: r["rate"]
                    for r in bench_modes(
                        spec, label, count, tmp, args.rounds, args.batch, args.workers
                    )
                }
                print(f"| {label} | {count} | encode only | {rows['encode']:.1f} | | |")
                for stage in ("decode", "pipeline"):
                    t, p = rows[f"{stage} threads"], rows[f"{stage} processes"]
                    name = "decode only" if stage == "decode" else "pipeline"
                    print(f"| {label} | {count} | {name} | {t:.1f} | {p:.1f} | {p / t:.2f} |")
        if args.modes or args.torch_threads:
            print(f"load average {os.getloadavg()[0]:.2f} at the end")
            return
        if args.decode_only:
            for label, rate in bench_decode_pools(args.photos * 2, tmp):
                print(f"| {label} | {rate:.0f} |")
            return
        rows = [
            bench_pipeline(
                random_checkpoint("ViT-B-32", tmp / "vitb32.safetensors"),
                "ViT-B-32",
                args.photos,
                (500, 375),
                tmp,
                args.device,
                args.batch,
            ),
            bench_pipeline(
                "demo", "demo (tiny)", args.photos * 4, (500, 375), tmp, args.device, args.batch
            ),
        ]
        print(f"device: {args.device}, batch size {args.batch}")
        print("| model | photos | photo size | bare forward img/s | pipeline img/s | ratio |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(
                f"| {r['model']} | {r['photos']} | {r['size']} | {r['bare']:.1f} | "
                f"{r['pipeline']:.1f} | {r['pipeline'] / r['bare']:.2f} |"
            )
        print()
        print("| decode + resize 500x375 JPEG to 224 | photos/s |")
        print("| --- | --- |")
        for label, rate in bench_decode_pools(args.photos * 2, tmp):
            print(f"| {label} | {rate:.0f} |")
        u = bench_unchanged(args.unchanged, tmp, args.device)
        print()
        print("| photos | first index (demo model) | unchanged re-index |")
        print("| --- | --- | --- |")
        print(f"| {u['photos']} | {u['first_s']:.1f} s | {u['unchanged_s']:.2f} s |")


if __name__ == "__main__":
    main()
