"""A tiny Stable Diffusion pipeline with random weights, built in code (no hub): draws noise,
but runs every step of the real diffusers path (2 steps at 64x64 in about 0.1 s on CPU).

`build_tiny_sd(folder)` saves a pipeline folder; `write_single_file(folder, file)` writes the
same weights as one original-layout (LDM) .safetensors checkpoint that diffusers'
`from_single_file` loads with ``config=folder``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

SIZE = 64  # pixels: UNet sample size 32 x VAE scale 2 (a VAE of two blocks halves once)


def _tokenizer_files(folder: Path) -> None:
    """vocab.json and merges.txt from open_clip's BPE file (the same token ids)."""
    import open_clip

    bpe = Path(open_clip.__file__).parent / "bpe_simple_vocab_16e6.txt.gz"
    lines = gzip.decompress(bpe.read_bytes()).decode("utf-8").split("\n")
    merges = lines[1 : 49152 - 256 - 2 + 1]
    from open_clip.tokenizer import bytes_to_unicode

    symbols = list(bytes_to_unicode().values())
    vocab = symbols + [s + "</w>" for s in symbols]
    vocab += ["".join(m.split()) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")


def build_tiny_sd(folder: Path) -> Path:
    """Build and save the tiny random pipeline in `folder` (seeded: the same weights each time)."""
    import torch
    from diffusers import (
        AutoencoderKL,
        DDIMScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=2,
        sample_size=SIZE // 2,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=32,
    )
    vae = AutoencoderKL(
        block_out_channels=(32, 64),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        latent_channels=4,
        norm_num_groups=32,
        sample_size=SIZE,
    )
    text = CLIPTextModel(
        CLIPTextConfig(
            bos_token_id=49406,
            eos_token_id=49407,
            pad_token_id=49407,
            hidden_size=32,
            intermediate_size=37,
            num_attention_heads=4,
            num_hidden_layers=2,
            vocab_size=49408,
            max_position_embeddings=77,
        )
    )
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
    )
    vocab_dir = folder.parent / f".{folder.name}-tokenizer"
    _tokenizer_files(vocab_dir)
    tokenizer = CLIPTokenizer(
        str(vocab_dir / "vocab.json"), str(vocab_dir / "merges.txt"), model_max_length=77
    )
    pipe = StableDiffusionPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text,
        tokenizer=tokenizer,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(str(folder), safe_serialization=True)
    return folder


def _unet_to_ldm(state: dict, layers: int = 2, blocks: int = 2) -> dict:
    """Diffusers UNet keys -> the original layout (the inverse of diffusers' conversion)."""
    pairs = [
        ("time_embedding.linear_1.", "time_embed.0."),
        ("time_embedding.linear_2.", "time_embed.2."),
        ("conv_in.", "input_blocks.0.0."),
        ("conv_norm_out.", "out.0."),
        ("conv_out.", "out.2."),
    ]
    for i in range(blocks):
        for j in range(layers):
            pairs.append((f"down_blocks.{i}.resnets.{j}.", f"input_blocks.{3 * i + j + 1}.0."))
            pairs.append((f"down_blocks.{i}.attentions.{j}.", f"input_blocks.{3 * i + j + 1}.1."))
        for j in range(layers + 1):
            pairs.append((f"up_blocks.{i}.resnets.{j}.", f"output_blocks.{3 * i + j}.0."))
            pairs.append((f"up_blocks.{i}.attentions.{j}.", f"output_blocks.{3 * i + j}.1."))
        if i < blocks - 1:
            pairs.append(
                (f"down_blocks.{i}.downsamplers.0.conv.", f"input_blocks.{3 * (i + 1)}.0.op.")
            )
            pairs.append(
                (f"up_blocks.{i}.upsamplers.0.", f"output_blocks.{3 * i + 2}.{1 if i == 0 else 2}.")
            )
    pairs.append(("mid_block.attentions.0.", "middle_block.1."))
    for j in range(2):
        pairs.append((f"mid_block.resnets.{j}.", f"middle_block.{2 * j}."))
    resnet = [
        ("norm1.", "in_layers.0."),
        ("conv1.", "in_layers.2."),
        ("norm2.", "out_layers.0."),
        ("conv2.", "out_layers.3."),
        ("time_emb_proj.", "emb_layers.1."),
        ("conv_shortcut.", "skip_connection."),
    ]
    out = {}
    for key, value in state.items():
        new = key
        for hf, sd in pairs:
            if new.startswith(hf):
                new = sd + new[len(hf) :]
                break
        if "resnets" in key or "mid_block.resnets" in key:
            for hf, sd in resnet:
                new = new.replace(hf, sd)
        out["model.diffusion_model." + new] = value
    return out


def _vae_to_ldm(state: dict, blocks: int = 2) -> dict:
    pairs = [
        ("nin_shortcut", "conv_shortcut"),
        ("norm_out", "conv_norm_out"),
        ("mid.attn_1.", "mid_block.attentions.0."),
    ]
    for i in range(blocks):
        for j in range(2):
            pairs.append((f"encoder.down.{i}.block.{j}.", f"encoder.down_blocks.{i}.resnets.{j}."))
        if i < blocks - 1:
            pairs.append((f"down.{i}.downsample.", f"down_blocks.{i}.downsamplers.0."))
            pairs.append((f"up.{blocks - 1 - i}.upsample.", f"up_blocks.{i}.upsamplers.0."))
        for j in range(3):
            pairs.append(
                (f"decoder.up.{blocks - 1 - i}.block.{j}.", f"decoder.up_blocks.{i}.resnets.{j}.")
            )
    for i in range(2):
        pairs.append((f"mid.block_{i + 1}.", f"mid_block.resnets.{i}."))
    attention = [
        ("norm.", "group_norm."),
        ("q.", "to_q."),
        ("k.", "to_k."),
        ("v.", "to_v."),
        ("proj_out.", "to_out.0."),
    ]
    out = {}
    for key, value in state.items():
        new = key
        for sd, hf in pairs:
            new = new.replace(hf, sd)
        if "attn_1" in new:
            for sd, hf in attention:
                new = new.replace(hf, sd)
            if new.endswith(".weight") and value.dim() == 2:
                value = value.reshape(*value.shape, 1, 1)
        out["first_stage_model." + new] = value
    return out


def write_single_file(folder: Path, file: Path) -> Path:
    """The pipeline in `folder` as one original-layout .safetensors file."""
    from safetensors.torch import load_file, save_file

    state = {}
    state.update(
        _unet_to_ldm(load_file(str(folder / "unet" / "diffusion_pytorch_model.safetensors")))
    )
    state.update(
        _vae_to_ldm(load_file(str(folder / "vae" / "diffusion_pytorch_model.safetensors")))
    )
    for key, value in load_file(str(folder / "text_encoder" / "model.safetensors")).items():
        # transformers 5 saves the text tower without its "text_model." prefix; the original
        # layout has it.
        name = key if key.startswith("text_model.") else f"text_model.{key}"
        state[f"cond_stage_model.transformer.{name}"] = value
    save_file({k: v.contiguous() for k, v in state.items()}, str(file))
    return file
