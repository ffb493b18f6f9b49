"""Indexing benchmarks (run on demand): `python tests/bench/bench_indexing.py`.

1. Full pipeline (scan, hash, decode in threads, preprocess, encode, commit) against the bare
   model forward pass on the same, already preprocessed images — same model, same run.
2. Unchanged re-index of a 10,000-photo folder.

Prints a Markdown table. Models use random weights: speed does not depend on the weights.
`--device cuda` runs the encoders on the GPU (`--batch` sets the batch size of both the bare
forward pass and the Indexer); tests/bench/bench_gpu.py has the fuller GPU measurements.
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
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
