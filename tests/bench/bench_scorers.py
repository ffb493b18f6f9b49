"""Rerank scorer benchmark: throughput of the CLIP scorer (whole photo and regions) on CPU and
of the tiny random VLM, and whether regions help on the demo's binding questions.

    python tests/bench/bench_scorers.py [--photos 100] [--seed 7] [--part all|roles|quality]

Part "roles" (`roles_table`): throughput per scorer role, one fresh process per role so that
its peak resident memory (VmHWM of /proc/self/status) is that role's alone: CLIP whole and
regions on the demo model, a tiny random-weight Qwen2-VL through `VlmScorer`, the endpoint
scorer against a stand-in server on loopback (our overhead only: JPEG encoding, request,
answer parsing), and the shipped demo diffusion generator. Tiny random models measure the
pipeline around a model, not a real VLM's speed.

Part "quality" (the rest):

Photos are demo scenes drawn here (engine.demo.scenes.draw_demo_scene), never the benchmark's files
or judgments. Throughput is (photos x questions) / seconds for 3 questions on fresh scorers, so
the first question pays for encoding the photos (crops) and the later ones reuse them.
Binding: for each "beside"/"above" pair of the demo, photos of the scene and of its swapped
binding; one question per object, mean p; AP of the right binding. Species: one object per
photo; AP of "is there a {species}" over all twelve species. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402 - after the thread setting

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _ap(scores: list[float], relevant: list[bool]) -> float:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    hits, total = 0, 0.0
    for rank, i in enumerate(order, 1):
        if relevant[i]:
            hits += 1
            total += hits / rank
    return total / max(1, sum(relevant))


ROLES = ("clip-whole", "clip-regions", "vlm-qwen2", "endpoint", "generator")
BATCHES = (1, 8)
REPEATS = 3


def _status_mb(field: str) -> float | None:
    """A memory line of /proc/self/status (kB there), MB; None where there is no /proc."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _rss_mb() -> float:
    """Resident memory now (VmRSS), MB."""
    now = _status_mb("VmRSS")
    return now if now is not None else _peak_mb()


def _peak_mb() -> float:
    """This process's peak resident memory so far, MB: VmHWM, the high-water mark of its own
    address space. getrusage's ru_maxrss only where /proc is missing: Linux carries it over
    exec, so a worker started by a big parent would report the parent's peak."""
    peak = _status_mb("VmHWM")
    if peak is not None:
        return peak
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _stand_in_endpoint() -> str:
    """A chat-completions server on loopback that answers every request at once with "Yes"
    and its log-probabilities: what is left of a request's time is ours."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    top = [{"token": "Yes", "logprob": -0.3}, {"token": "No", "logprob": -1.4}]
    first = {"token": "Yes", "logprob": -0.3, "top_logprobs": top}
    reply = json.dumps(
        {"choices": [{"message": {"content": "Yes"}, "logprobs": {"content": [first]}}]}
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def measure_role(role: str, count: int, seed: int, model_dir: str = "") -> dict[str, object]:
    """One role in this (fresh) process: load seconds, seconds to the first answer of a fresh
    scorer (one photo), photos/s over `count` photos at each batch size (one question, warm
    process), peak RSS and RSS before loading (after the imports)."""
    import torch

    from engine.demo.scenes import DEMO_CLASSES, DemoScene, draw_demo_scene
    from engine.indexing.hashes import content_hash
    from engine.rerank.base import Photo, Question

    rng = np.random.default_rng(seed)
    folder = Path(tempfile.mkdtemp(prefix="bench-roles-"))
    names = [c.common_name for c in DEMO_CLASSES]
    photos = []
    for i in range(count):
        path = folder / f"{i}.jpg"
        draw_demo_scene(rng, DemoScene((names[i % len(names)],)))[0].save(path, quality=90)
        photos.append(Photo(i + 1, path, content_hash(path)))
    question = Question(f"Is there a {names[0]}?", target=names[0])
    before, peak_before = _rss_mb(), _peak_mb()
    started = time.perf_counter()
    if role == "generator":
        from engine.progress import CancelToken
        from engine.visret.generator import load_generator

        generator = load_generator("demo-diffusion", device="cpu")
        load = time.perf_counter() - started
        settings = generator.default_settings()
        t0 = time.perf_counter()
        generator.draw("a red circle", 0, settings, lambda _: None, CancelToken())
        first = time.perf_counter() - t0
        seconds = []
        for s in range(1, REPEATS + 1):
            t0 = time.perf_counter()
            generator.draw(names[s % len(names)], s, settings, lambda _: None, CancelToken())
            seconds.append(time.perf_counter() - t0)
        rate = 1 / min(seconds)
        model = f"demo-diffusion, {settings.steps} steps, {settings.width}x{settings.height}"
        return {
            "role": role,
            "model": model,
            "load": load,
            "first": first,
            "rates": {"1": rate},
            "before": before,
            "peak_before": peak_before,
            "peak": _peak_mb(),
            "threads": torch.get_num_threads(),
        }
    if role.startswith("clip"):
        from engine.models.encoders import load_encoder
        from engine.rerank.clip import ClipScorer

        encoder = load_encoder("demo", device="cpu")
        regions = role == "clip-regions"

        def fresh(batch: int) -> object:
            return ClipScorer(encoder, regions=regions, batch_size=batch)

        model = "demo model" + (", whole + 9 crops" if regions else "")
    elif role == "vlm-qwen2":
        from engine.rerank.vlm import VlmScorer

        vlm = VlmScorer(Path(model_dir), device="cpu", batch_size=8)

        def fresh(batch: int) -> object:
            vlm.batch_size = batch  # the scorer keeps nothing between calls
            return vlm

        model = "tiny random Qwen2-VL (1 layer, 56 px)"
    else:
        from engine.rerank.endpoint import EndpointScorer

        url = _stand_in_endpoint()

        def fresh(batch: int) -> object:
            return EndpointScorer(url, "m", batch_size=batch)

        model = "stand-in server on loopback, requests at once"
    scorer = fresh(8)
    load = time.perf_counter() - started
    t0 = time.perf_counter()
    scorer.score(photos[:1], question)  # type: ignore[attr-defined]
    first = time.perf_counter() - t0
    rates = {}
    for batch in BATCHES:
        # Best of 3 fresh scorers: the cores are shared, and the slower runs measure others.
        seconds = []
        for _ in range(REPEATS):
            scorer = fresh(batch)
            t0 = time.perf_counter()
            scorer.score(photos, question)  # type: ignore[attr-defined]
            seconds.append(time.perf_counter() - t0)
        rates[str(batch)] = len(photos) / min(seconds)
    return {
        "role": role,
        "model": model,
        "load": load,
        "first": first,
        "rates": rates,
        "before": before,
        "peak_before": peak_before,
        "peak": _peak_mb(),
        "threads": torch.get_num_threads(),
    }


def roles_table(count: int, seed: int) -> None:
    """Run each role in its own process and print one Markdown table."""
    from tests.tiny_vlm import build_tiny_qwen2_vl

    model_dir = build_tiny_qwen2_vl(Path(tempfile.mkdtemp(prefix="bench-qwen2-")) / "qwen2-vl")
    rows = []
    for role in ROLES:
        command = [sys.executable, __file__, "--role", role, "--photos", str(count)]
        command += ["--seed", str(seed), "--model-dir", str(model_dir)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
        if done.returncode != 0:
            print(f"{role}: failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    threads = rows[0]["threads"] if rows else "?"
    print(f"\nScorer roles, device cpu ({os.cpu_count()} CPUs, {threads} torch threads), ")
    print(f"{count} demo photos, one question, best of {REPEATS}; a fresh process per role;")
    print(f"load average after: {os.getloadavg()[0]:.1f}\n")  # the cores may be shared
    print(
        "| role | model | load s | first answer s | photos/s, batch 1 | photos/s, batch 8 "
        "| peak RSS MB (before load) |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |"
    )
    for row in rows:
        rates = row["rates"]
        if row["role"] == "generator":
            one, eight = f"{rates['1']:.2f} drawings/s", "-"
        else:
            one, eight = f"{rates['1']:.1f}", f"{rates['8']:.1f}"
        print(
            f"| {row['role']} | {row['model']} | {row['load']:.2f} | {row['first']:.3f} "
            f"| {one} | {eight} | {row['peak']:.0f} ({row['before']:.0f}) |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--part", choices=("all", "roles", "quality"), default="all")
    parser.add_argument("--role", choices=ROLES, help=argparse.SUPPRESS)  # one role's worker
    parser.add_argument("--model-dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        print(json.dumps(measure_role(args.role, args.photos, args.seed, args.model_dir)))
        return
    if args.part in ("all", "roles"):
        roles_table(min(args.photos, 32), args.seed)
    if args.part == "roles":
        return

    from engine.demo.scenes import (
        _ABOVE_PAIRS,
        _BESIDE_PAIRS,
        DEMO_CLASSES,
        DemoScene,
        _swap_colours,
        draw_demo_scene,
    )
    from engine.indexing.hashes import content_hash
    from engine.models.encoders import load_encoder
    from engine.rerank.base import Photo, Question
    from engine.rerank.clip import ClipScorer
    from engine.rerank.vlm import VlmScorer
    from tests.tiny_vlm import build_tiny_vlm

    rng = np.random.default_rng(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="bench-scorers-"))
    count = 0

    def draw(scene: DemoScene) -> Photo:
        nonlocal count
        path = folder / f"{count}.jpg"
        draw_demo_scene(rng, scene)[0].save(path, quality=90)
        count += 1
        return Photo(count, path, content_hash(path))

    encoder = load_encoder("demo", device="cpu")
    names = [c.common_name for c in DEMO_CLASSES]
    photos = [draw(DemoScene((names[i % len(names)],))) for i in range(args.photos)]
    questions = [Question(f"Is there a {x}?", target=x) for x in names[:3]]

    def throughput(scorer: object) -> float:
        start = time.perf_counter()
        for q in questions:
            scorer.score(photos, q, history=(), context="")  # type: ignore[attr-defined]
        return len(photos) * len(questions) / (time.perf_counter() - start)

    vlm = VlmScorer(build_tiny_vlm(folder / "tiny-vlm"), device="cpu", batch_size=8)
    rows = [
        ("clip:whole (demo model, CPU)", throughput(ClipScorer(encoder, regions=False))),
        (
            "clip:regions (demo model, CPU, whole + 9 crops)",
            throughput(ClipScorer(encoder, regions=True)),
        ),
        ("vlm (tiny random LLaVA, CPU, batch 8)", throughput(vlm)),
    ]
    print(f"\n{len(photos)} photos x {len(questions)} questions, {os.cpu_count()} CPUs\n")
    print("| scorer | photos x questions / s |\n| --- | ---: |")
    for name, rate in rows:
        print(f"| {name} | {rate:.1f} |")

    per_side = max(10, args.photos // 10)
    binding: dict[bool, list[float]] = {False: [], True: []}
    for a, b in list(_BESIDE_PAIRS) + list(_ABOVE_PAIRS):
        layout = "beside" if (a, b) in _BESIDE_PAIRS else "above"
        drawn = [draw(DemoScene((a, b), layout)) for _ in range(per_side)]
        drawn += [draw(DemoScene(_swap_colours(a, b), layout)) for _ in range(per_side)]
        right = [True] * per_side + [False] * per_side
        for regions in (False, True):
            scorer = ClipScorer(encoder, regions=regions)
            per_q = [
                [x.p_yes for x in scorer.score(drawn, Question(f"Is there a {o}?", target=o))]
                for o in (a, b)
            ]
            binding[regions].append(_ap(list(np.mean(per_q, axis=0)), right))
    species: dict[bool, float] = {}
    for regions in (False, True):
        scorer = ClipScorer(encoder, regions=regions)
        species[regions] = float(
            np.mean(
                [
                    _ap(
                        [x.p_yes for x in scorer.score(photos, Question("?", target=name))],
                        [names[i % len(names)] == name for i in range(len(photos))],
                    )
                    for name in names
                ]
            )
        )
    print(f"\nseed {args.seed}, {per_side} photos per scene\n")
    print("| CLIP scorer | binding AP (6 pairs, mean) | species mAP (12) |\n| --- | ---: | ---: |")
    for regions in (False, True):
        name = "regions" if regions else "whole"
        print(f"| {name} | {np.mean(binding[regions]):.3f} | {species[regions]:.3f} |")


if __name__ == "__main__":
    main()
