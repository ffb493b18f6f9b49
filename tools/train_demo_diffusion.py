"""Train a tiny text-conditioned diffusion model on demo drawings, as a Stable Diffusion folder.

    python tools/train_demo_diffusion.py train OUT_FOLDER [--minutes 15]
    python tools/train_demo_diffusion.py evaluate OUT_FOLDER [--grid grid.png] [--benchmark]

`train` builds a `StableDiffusionPipeline` that diffusers loads like any other:

- text encoder: the demo CLIP model's own text tower (resources/models), converted to a
  transformers `CLIPTextModel` and frozen; its per-token states condition the UNet through
  cross-attention, as in Stable Diffusion. The tokenizer is a `CLIPTokenizer` built from
  open_clip's BPE file (the same token ids), 16 tokens long like the demo model;
- VAE: an `AutoencoderKL` with one halving, trained first (under a minute) so that a
  16x16x3 "latent" is the 32x32 picture shrunk 2x: the VAE is a learned 2x upsampler,
  nearly free, and the UNet works in pixel space at 16x16. A latent VAE worth the name would
  cost most of the budget; pixels keep the colours exact and the demo shapes still apart.
  The pictures are small (32x32) because the shared 2-core machine manages about two
  training steps of 32 a second on this UNet; the demo CLIP model sees 64x64 anyway;
- UNet: a small `UNet2DConditionModel` (about 1 M parameters; cross-attention to the
  caption at 8x8) trained for noise prediction (DDPM schedule, 10 % of captions dropped for
  classifier-free guidance); drawn with DDIM.

Training data are procedurally drawn demo scenes (`tools.train_demo_clip.random_scene`,
`engine.demo.scenes.draw_demo_scene`) with their captions (`caption_scene`), sometimes wrapped in the window's
prompt templates: never the benchmark's queries or judgments. Everything runs on the CPU, in a
wall-time budget that includes drawing the data, with one torch thread by default: on the
2-core machine shared with other work, two OpenMP threads mostly waited on each other.

`evaluate` measures (a) whether the drawings are recognisable: the demo CLIP model's zero-shot
colour and shape accuracy on drawings of held-out random captions, beside the demo painter's;
(b) optionally VisRet mAP@10 on the demo benchmark with it as the generator, against text
search and the demo painter.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "2")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

DRAWN = 64  # pixels the demo scene is drawn at, then shrunk (antialiased) to IMAGE
IMAGE = 32  # pixels the pipeline draws
LATENT = 16  # the UNet's side: the picture shrunk 2x
CONTEXT = 16  # the demo text tower's context length
DROP_CAPTION = 0.1  # share of empty captions, for classifier-free guidance
TRAIN_SEED, HELD_OUT_SEED = 20_261, 90_001  # seed streams: training vs evaluation captions


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The text tower


def tokenizer_files(folder: Path) -> None:
    """vocab.json and merges.txt from open_clip's BPE file (the same token ids as the demo)."""
    import open_clip
    from open_clip.tokenizer import bytes_to_unicode

    bpe = Path(open_clip.__file__).parent / "bpe_simple_vocab_16e6.txt.gz"
    lines = gzip.decompress(bpe.read_bytes()).decode("utf-8").split("\n")
    merges = lines[1 : 49152 - 256 - 2 + 1]
    symbols = list(bytes_to_unicode().values())
    vocab = symbols + [s + "</w>" for s in symbols]
    vocab += ["".join(m.split()) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")


def demo_text_tower(scratch: Path) -> tuple[Any, Any]:
    """The demo CLIP model's text tower as (CLIPTokenizer, CLIPTextModel), checked against
    open_clip: the same per-token states for the same caption."""
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    from engine.models.encoders import load_encoder

    clip = load_encoder("demo", device="cpu").model
    state = clip.state_dict()
    width = state["ln_final.weight"].shape[0]
    layers = len(clip.transformer.resblocks)
    config = CLIPTextConfig(
        vocab_size=state["token_embedding.weight"].shape[0],
        hidden_size=width,
        intermediate_size=state["transformer.resblocks.0.mlp.c_fc.weight"].shape[0],
        num_hidden_layers=layers,
        num_attention_heads=clip.transformer.resblocks[0].attn.num_heads,
        max_position_embeddings=CONTEXT,
        hidden_act="gelu",  # open_clip's default GELU, not OpenAI's quick GELU
        bos_token_id=49406,
        eos_token_id=49407,
        pad_token_id=49407,
        projection_dim=state["text_projection"].shape[1],
    )
    text = CLIPTextModel(config)
    mapped = {
        "text_model.embeddings.token_embedding.weight": state["token_embedding.weight"],
        "text_model.embeddings.position_embedding.weight": state["positional_embedding"],
        "text_model.final_layer_norm.weight": state["ln_final.weight"],
        "text_model.final_layer_norm.bias": state["ln_final.bias"],
    }
    for i in range(layers):
        ours, theirs = f"text_model.encoder.layers.{i}.", f"transformer.resblocks.{i}."
        q, k, v = state[theirs + "attn.in_proj_weight"].chunk(3)
        qb, kb, vb = state[theirs + "attn.in_proj_bias"].chunk(3)
        for name, weight, bias in (("q", q, qb), ("k", k, kb), ("v", v, vb)):
            mapped[ours + f"self_attn.{name}_proj.weight"] = weight
            mapped[ours + f"self_attn.{name}_proj.bias"] = bias
        pairs = {
            "self_attn.out_proj": "attn.out_proj",
            "layer_norm1": "ln_1",
            "layer_norm2": "ln_2",
            "mlp.fc1": "mlp.c_fc",
            "mlp.fc2": "mlp.c_proj",
        }
        for hf, oc in pairs.items():
            for part in ("weight", "bias"):
                mapped[ours + f"{hf}.{part}"] = state[theirs + f"{oc}.{part}"]
    own = text.state_dict()
    # transformers 5 may keep the text tower without its "text_model." prefix
    if not any(k.startswith("text_model.") for k in own):
        mapped = {k.removeprefix("text_model."): v for k, v in mapped.items()}
    missing = set(own) - set(mapped) - {k for k in own if "position_ids" in k}
    if missing:
        raise RuntimeError(f"text tower conversion left out {sorted(missing)}")
    text.load_state_dict(mapped, strict=False)
    text.eval().requires_grad_(False)
    tokenizer_files(scratch)
    tokenizer = CLIPTokenizer(
        str(scratch / "vocab.json"), str(scratch / "merges.txt"), model_max_length=CONTEXT
    )
    # The conversion is exact: open_clip's token states equal the converted tower's.
    caption = ["a red circle above a blue square"]
    ids = tokenizer(caption, padding="max_length", max_length=CONTEXT, return_tensors="pt")
    with torch.no_grad():
        ours_states = text(ids.input_ids).last_hidden_state
        x = clip.token_embedding(ids.input_ids) + clip.positional_embedding
        x = clip.ln_final(clip.transformer(x, attn_mask=clip.attn_mask))
    error = (ours_states - x).abs().max().item()
    if error > 1e-4:
        raise RuntimeError(f"converted text tower differs from open_clip's by {error:.2e}")
    return tokenizer, text


def encode_captions(tokenizer: Any, text: Any, captions: list[str]) -> torch.Tensor:
    """Per-token states (n, 16, width) of `captions`, as the pipeline computes them."""
    ids = tokenizer(
        captions, padding="max_length", max_length=CONTEXT, truncation=True, return_tensors="pt"
    ).input_ids
    with torch.no_grad():
        return text(ids).last_hidden_state


# ---------------------------------------------------------------------------------------------
# Data


def training_pairs(rng: np.random.Generator, count: int) -> tuple[np.ndarray, list[str]]:
    """`count` random demo drawings at 32x32 (uint8) and a caption of each; a quarter of the
    captions are wrapped in one of the window's prompt templates, as VisRet will prompt."""
    from PIL import Image

    from engine.demo.scenes import draw_demo_scene
    from tools.train_demo_clip import caption_scene, random_scene

    templates = [
        t["template"]
        for t in json.loads((REPO / "resources/visret/prompts.json").read_text())["templates"]
    ]
    images = np.zeros((count, IMAGE, IMAGE, 3), dtype=np.uint8)
    captions = []
    for i in range(count):
        scene = random_scene(rng)
        image, _, _ = draw_demo_scene(rng, scene, DRAWN)
        images[i] = np.asarray(image.convert("RGB").resize((IMAGE, IMAGE), Image.BOX))
        caption, _ = caption_scene(rng, scene)
        if rng.uniform() < 0.25:
            caption = templates[int(rng.integers(len(templates)))].format(query=caption)
        captions.append(caption)
    return images, captions


def to_pixels(images: np.ndarray) -> torch.Tensor:
    """uint8 (n, h, w, 3) -> float (n, 3, h, w) in [-1, 1]."""
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def shrink(pixels: torch.Tensor) -> torch.Tensor:
    """The 'latent' of a drawing: the drawing itself at half size."""
    return torch.nn.functional.avg_pool2d(pixels, 2)


# ---------------------------------------------------------------------------------------------
# Models


def pixel_vae() -> Any:
    """An `AutoencoderKL` whose latent is the picture itself at half size, set by hand, not
    trained: the encoder's mean is the 2x2 average of the picture and the decoder repeats each
    latent pixel 2x2 (nearest neighbour), exact to about 1e-6.

    Every resnet and attention layer adds zero (their last projection is zero), so the signal
    only passes the convolutions set below and the final GroupNorm and SiLU. The GroupNorm
    would rescale each picture by its own spread; two channels held at +-K (K >> 1) make the
    spread a constant K/2 instead. SiLU(a) - SiLU(-a) = a then undoes the SiLU exactly, from a
    +z and a -z copy of each channel.
    """
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=3,
        block_out_channels=(8, 8),  # two blocks: one 2x step between latent and picture
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        layers_per_block=1,
        norm_num_groups=1,  # one group: the +-K channels steady every normalisation
        sample_size=IMAGE,
        scaling_factor=1.0,  # latents are pixels in [-1, 1] already
    )
    big = 1000.0
    spread = big / 2  # the group's standard deviation: sqrt((K^2 + K^2) / 8 channels)
    with torch.no_grad():
        for name, parameter in vae.named_parameters():
            if name.endswith(("conv2.weight", "conv2.bias")) or ".to_out." in name:
                parameter.zero_()

        def spread_in(conv: Any) -> None:  # 3 channels -> (+z, -z, +K, -K, 0, 0)
            conv.weight.zero_()
            conv.bias.zero_()
            for c in range(3):
                conv.weight[c, c, 1, 1] = 1.0
                conv.weight[c + 3, c, 1, 1] = -1.0
            conv.bias[6], conv.bias[7] = big, -big

        def gather_out(conv: Any, channels: int) -> None:  # SiLU(+z) - SiLU(-z), rescaled
            conv.weight.zero_()
            conv.bias.zero_()
            for c in range(channels):
                conv.weight[c, c, 1, 1] = spread
                conv.weight[c, c + 3, 1, 1] = -spread

        def identity(conv: Any, taps: list[tuple[int, int]]) -> None:
            conv.weight.zero_()
            conv.bias.zero_()
            for c in range(conv.weight.shape[0]):
                for y, x in taps:
                    conv.weight[c, c, y, x] = 1.0 / len(taps)

        spread_in(vae.encoder.conv_in)
        spread_in(vae.decoder.conv_in)
        # the encoder's downsampler pads right and bottom by one, then a stride-2 3x3
        # convolution: taps (0..1, 0..1) are the 2x2 average
        identity(vae.encoder.down_blocks[0].downsamplers[0].conv, [(0, 0), (0, 1), (1, 0), (1, 1)])
        identity(vae.decoder.up_blocks[0].upsamplers[0].conv, [(1, 1)])  # after a 2x repeat
        gather_out(vae.encoder.conv_out, 3)
        vae.encoder.conv_out.bias[3:6] = -20.0  # log variance: the latent is exact
        gather_out(vae.decoder.conv_out, 3)
        identity(vae.quant_conv, [(0, 0)])
        identity(vae.post_quant_conv, [(0, 0)])
    return vae.eval().requires_grad_(False)


def build_unet(cross_attention_dim: int) -> Any:
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        sample_size=LATENT,
        in_channels=3,
        out_channels=3,
        # Small enough for about 0.5-2 s a step of 32 on 2 shared cores: 16x16 with plain
        # convolutions, 8x8 with cross-attention to the caption.
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=cross_attention_dim,
        attention_head_dim=32,
        norm_num_groups=16,
    )


def train_unet(
    unet: Any,
    scheduler: Any,
    latents: torch.Tensor,
    states: torch.Tensor,
    empty: torch.Tensor,
    seconds: float,
    batch: int = 32,
) -> tuple[list[float], int]:
    """Noise prediction on (latent, caption) pairs until `seconds` have passed (cosine
    learning rate over the expected number of steps). Returns loss per 25 steps and steps."""
    optimiser = torch.optim.AdamW(unet.parameters(), lr=2e-3, weight_decay=0.01)
    generator = torch.Generator().manual_seed(2)
    losses, window, started, step = [], [], time.perf_counter(), 0
    expected: float | None = None
    unet.train()
    while (elapsed := time.perf_counter() - started) < seconds:
        pick = torch.randint(len(latents), (batch,), generator=generator)
        x0 = latents[pick]
        context = states[pick].clone()
        drop = torch.rand(batch, generator=generator) < DROP_CAPTION
        context[drop] = empty
        noise = torch.randn(x0.shape, generator=generator)
        t = torch.randint(scheduler.config.num_train_timesteps, (batch,), generator=generator)
        noisy = scheduler.add_noise(x0, noise, t)
        loss = torch.nn.functional.mse_loss(unet(noisy, t, context).sample, noise)
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
        if step == 20:  # the pace is known now: schedule the learning rate to the budget
            expected = seconds / (elapsed / 20)
        if expected is not None:
            for group in optimiser.param_groups:
                group["lr"] = 2e-3 * 0.5 * (1 + np.cos(np.pi * min(step / expected, 1.0)))
        optimiser.step()
        window.append(loss.item())
        step += 1
        if step % 25 == 0:
            losses.append(float(np.mean(window)))
            window = []
            log(f"unet step {step} ({elapsed:.0f} s): loss {losses[-1]:.4f}")
    unet.eval().requires_grad_(False)
    return losses, step


def half_precision(folder: Path) -> None:
    """Store every weight file in fp16 (half the size; diffusers loads it as float32 on CPU)."""
    from safetensors.torch import load_file, save_file

    for path in folder.rglob("*.safetensors"):
        state = {k: v.half() if v.is_floating_point() else v for k, v in load_file(path).items()}
        save_file(state, str(path))


def train(out: Path, minutes: float, pool: int, threads: int) -> None:
    from diffusers import DDIMScheduler, DDPMScheduler, StableDiffusionPipeline

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    budget = minutes * 60.0
    started = time.perf_counter()
    scratch = out.parent / f".{out.name}-tokenizer"
    tokenizer, text = demo_text_tower(scratch)
    images, captions = training_pairs(np.random.default_rng(TRAIN_SEED), pool)
    log(f"{pool} drawings and captions in {time.perf_counter() - started:.0f} s")
    states = encode_captions(tokenizer, text, captions)
    empty = encode_captions(tokenizer, text, [""])[0]

    vae = pixel_vae()
    with torch.no_grad():
        latents = torch.cat([shrink(to_pixels(images[i : i + 512])) for i in range(0, pool, 512)])

    schedule = {
        "num_train_timesteps": 1000,
        "beta_start": 0.0001,
        "beta_end": 0.02,
        "beta_schedule": "linear",
        "clip_sample": True,  # pixel-space latents live in [-1, 1]
        "prediction_type": "epsilon",
    }
    unet = build_unet(text.config.hidden_size)
    left = budget - (time.perf_counter() - started) - 20.0  # 20 s kept for saving
    unet_losses, steps = train_unet(unet, DDPMScheduler(**schedule), latents, states, empty, left)
    pipe = StableDiffusionPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text,
        tokenizer=tokenizer,
        scheduler=DDIMScheduler(**schedule, set_alpha_to_one=True),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(str(out), safe_serialization=True)
    half_precision(out)
    total = time.perf_counter() - started
    report = {
        "seconds": round(total, 1),
        "drawings": pool,
        "unet_steps": steps,
        "unet_loss": unet_losses,
        "unet_parameters": sum(p.numel() for p in unet.parameters()),
        "torch_threads": torch.get_num_threads(),
    }
    (out.parent / f"{out.name}-training.json").write_text(json.dumps(report, indent=1))
    log(f"saved {out} after {total:.0f} s ({steps} UNet steps)")


# ---------------------------------------------------------------------------------------------
# Evaluation


def held_out_captions(count: int) -> list[tuple[str, set[str], set[str]]]:
    """Captions of random scenes from a seed stream training never used: (caption, colours
    named, shapes named)."""
    from engine.demo.scenes import COLOURS, SHAPES
    from tools.train_demo_clip import caption_scene, random_scene

    rng = np.random.default_rng(HELD_OUT_SEED)
    out = []
    for _ in range(count):
        caption, _ = caption_scene(rng, random_scene(rng))
        words = caption.replace(",", " ").split()
        colours = {c for c in COLOURS if c in words}
        shapes = {s for s in SHAPES if any(w.rstrip("s") == s for w in words)}
        out.append((caption, colours, shapes))
    return out


def recognisability(generators: dict[str, Any], count: int, grid: Path | None) -> None:
    """Print the demo CLIP model's zero-shot colour and shape accuracy on each generator's
    drawings of the same held-out captions: a drawing is right when the best of the 12
    "<colour> <shape>" texts has a colour (shape) the caption names."""
    from PIL import Image, ImageDraw

    from engine.demo.scenes import DEMO_CLASSES
    from engine.models.encoders import load_encoder
    from engine.progress import CancelToken, no_progress

    encoder = load_encoder("demo", device="cpu")
    classes = [c.common_name for c in DEMO_CLASSES]
    text = encoder.encode_texts(classes)
    captions = held_out_captions(count)
    sheets = []
    print("| generator | drawings | colour accuracy | shape accuracy | both | s per drawing |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, generator in generators.items():
        settings = generator.default_settings()
        started = time.perf_counter()
        drawings = [
            generator.draw(caption, seed, settings, no_progress, CancelToken())
            for seed, (caption, _, _) in enumerate(captions)
        ]
        seconds = (time.perf_counter() - started) / len(drawings)
        best = (encoder.encode_images(drawings) @ text.T).argmax(axis=1)
        colour = shape = both = 0
        for (_, colours, shapes), index in zip(captions, best, strict=True):
            c, s = classes[index].split()
            colour += c in colours
            shape += s in shapes
            both += c in colours and s in shapes
        n = len(captions)
        print(
            f"| {name} | {n} | {colour / n:.2f} | {shape / n:.2f} | {both / n:.2f} | "
            f"{seconds:.3f} |"
        )
        sheets.append(drawings)
    if grid is not None:
        # One row per caption (the first 12), one column per generator, captions beside.
        rows, side = min(12, count), 96
        sheet = Image.new("RGB", (len(sheets) * side + 300, rows * side), "white")
        draw = ImageDraw.Draw(sheet)
        for row in range(rows):
            for column, drawings in enumerate(sheets):
                sheet.paste(drawings[row].resize((side, side)), (column * side, row * side))
            draw.text((len(sheets) * side + 6, row * side + 40), captions[row][0], fill="black")
        sheet.save(grid)
        log(f"grid of {rows} captions x {list(generators)} in {grid}")


def benchmark(folder: Path, k: int = 10) -> None:
    """VisRet mAP@k on the demo benchmark: text, painter, and the trained model."""
    import tempfile

    from engine.benchmarks.runner import run_methods
    from engine.catalog.library import Library
    from engine.demo.collection import write_demo_collection
    from engine.evaluation.evaluate import load_judgments, load_queries_csv
    from engine.indexing.indexer import Indexer
    from engine.models.encoders import load_encoder

    specs = ["text", "visret", "visret"]
    with tempfile.TemporaryDirectory() as tmp:
        collection = write_demo_collection(Path(tmp) / "demo")
        encoder = load_encoder("demo", device="cpu")
        library = Library.open(Path(tmp) / "lib")
        Indexer(library, encoder).run(collection.root)
        queries = load_queries_csv(collection.queries_path)
        judgments = load_judgments(collection.judgments_path)
        results = {}
        for label, spec, generator in (
            ("text", specs[0], None),
            ("visret, demo painter", specs[1], "demo-painter"),
            ("visret, demo diffusion", specs[2], str(folder)),
        ):
            started = time.perf_counter()
            bench = run_methods(
                library, lambda: encoder, queries, judgments, [spec], k=k, generator=generator or ""
            )
            results[label] = bench.results[spec]
            log(f"{label}: {time.perf_counter() - started:.0f} s")
        library.close()
    names = list(results)
    print(f"| group | {' | '.join(names)} |")
    print("| --- |" + " ---: |" * len(names))
    print("| **all** | " + " | ".join(f"{results[n].mean.mAP:.3f}" for n in names) + " |")
    for group in sorted(results[names[0]].by_category.get("category", {})):
        row = [results[n].by_category["category"][group].mAP for n in names]
        print(f"| {group} | " + " | ".join(f"{v:.3f}" for v in row) + " |")


def evaluate(folder: Path, count: int, grid: Path | None, with_benchmark: bool) -> None:
    from engine.visret.generator import load_generator

    torch.set_num_threads(1)  # see --threads: two threads wait on each other here
    generators = {
        "demo painter": load_generator("demo-painter"),
        "demo diffusion": load_generator(str(folder), device="cpu"),
    }
    recognisability(generators, count, grid)
    if with_benchmark:
        benchmark(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    trainer = commands.add_parser("train", help="train and save a pipeline folder")
    trainer.add_argument("out", type=Path)
    trainer.add_argument("--minutes", type=float, default=15.0, help="wall-time budget")
    trainer.add_argument("--pool", type=int, default=12_000, help="drawings rendered")
    # One thread: on 2 cores shared with other work, 2 OpenMP threads wait on each other
    # (measured 5.4 s a step against 1.0 s with one thread, same load).
    trainer.add_argument("--threads", type=int, default=1, help="torch threads")
    judge = commands.add_parser("evaluate", help="recognisability and the demo benchmark")
    judge.add_argument("folder", type=Path)
    judge.add_argument("--drawings", type=int, default=60)
    judge.add_argument("--grid", type=Path, default=None)
    judge.add_argument("--benchmark", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "train":
        train(args.out, args.minutes, args.pool, args.threads)
    else:
        evaluate(args.folder, args.drawings, args.grid, args.benchmark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
