"""Per drawing: time and peak memory of the tiny Stable Diffusion pipeline on CPU.

Run with: python -m pytest tests/bench/bench_generator.py -m bench -s
"""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import replace

import pytest

from engine.progress import CancelToken
from engine.visret.generator import DrawingCache, draw_all, load_generator


@pytest.mark.bench
def test_tiny_pipeline_per_drawing(tiny_sd_dir, tmp_path):
    started = time.perf_counter()
    generator = load_generator(str(tiny_sd_dir), device="cpu")
    load_seconds = time.perf_counter() - started
    rows = []
    for steps in (1, 2, 4):
        settings = replace(generator.default_settings(), steps=steps)
        generator.draw("warm up", 99, settings, lambda _: None, CancelToken())
        times = []
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for seed in range(5):
            t0 = time.perf_counter()
            generator.draw("a red circle on grass", seed, settings, lambda _: None, CancelToken())
            times.append(time.perf_counter() - t0)
        # torch's tensors are not Python allocations (tracemalloc misses them): the process
        # peak RSS growth over the drawings is what a user would see.
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        rows.append((steps, statistics.median(times), grown / 1e3))
    cache = DrawingCache(tmp_path)
    settings = replace(generator.default_settings(), steps=2)
    draw_all(generator, "a fox", range(3), settings, cache=cache)
    t0 = time.perf_counter()
    draw_all(generator, "a fox", range(3), settings, cache=cache)
    cached = (time.perf_counter() - t0) / 3
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    print(f"\ntiny SD (64x64, CPU): load {load_seconds:.2f} s, process peak RSS {rss:.0f} MB")
    print("| steps | s / drawing (median of 5) | peak RSS growth MB |")
    print("| ---: | ---: | ---: |")
    for steps, seconds, peak in rows:
        print(f"| {steps} | {seconds:.3f} | {peak:.1f} |")
    print(f"| cached | {cached:.4f} | - |")
