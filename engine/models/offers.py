"""The catalogue of models the chooser offers, for the three roles a search needs: CLIP
encoders (every search), image generators (VisRet's drawings) and vision-language models
(Reranked's questions); size, memory, what each is good at, licence."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from engine.models.spec import DEMO_SPEC

_MB = 1_000_000
_GB = 1_000_000_000

Role = Literal["encoder", "generator", "vlm"]
ROLES: tuple[Role, ...] = ("encoder", "generator", "vlm")
ROLE_NAMES: dict[Role, str] = {
    "encoder": "search model (CLIP encoder)",
    "generator": "image generator",
    "vlm": "vision-language model",
}


@dataclass(frozen=True)
class ModelOffer:
    """One entry of the model chooser's catalogue."""

    spec: str  # docs/SPEC.md §5.2 model spec
    label: str
    download_bytes: int  # 0 for the bundled demo model
    memory_bytes: int  # approximate memory to run it
    good_at: str
    licence: str
    source: str  # where the weights come from (URL or hub id)
    role: Role = "encoder"
    # A multi-file repository (generator, VLM): the files fetched, as huggingface_hub's
    # allow_patterns / ignore_patterns; empty for encoders (one config, one weights file).
    files: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    gated: bool = False  # the hub asks for the licence to be accepted and a token (HF_TOKEN)
    # Whether `download_bytes` is the hub's published figure (or exact: an encoder's fp32
    # weights are its parameter count x 4 bytes) rather than an estimate, and whether `licence`
    # was read from the model's card on the hub rather than written from memory. Unchecked
    # figures are shown as estimates ("≈", "(estimate)"); a download records the sizes the hub
    # reports (`engine.models.snapshots.recorded_sizes`), which replace the estimate from then on.
    # `memory_bytes` is always a rule of thumb.
    size_verified: bool = False
    licence_verified: bool = False

    def takes(self, path: str) -> bool:
        """Whether a download of this repository fetches the file `path` (its `files` and
        `skip` patterns, matched as huggingface_hub matches allow and ignore patterns)."""
        allowed = not self.files or any(fnmatchcase(path, pattern) for pattern in self.files)
        return allowed and not any(fnmatchcase(path, pattern) for pattern in self.skip)


def _memory(weights: int) -> int:
    """Rough memory to run a model: its fp32 weights, a quarter more for a batch of 64 images'
    activations, and ~400 MB for torch itself. A rule of thumb, not a measurement."""
    return int(weights * 1.25) + 400 * _MB


# Download sizes are the fp32 weights of each published checkpoint: parameter count x 4 bytes
# of the open_clip architecture (counted with open_clip 3.3), which is what the hub lists for
# the files: 605 MB (ViT-B-32), 1.71 GB (ViT-L-14), 599 MB (BioCLIP, a ViT-B-16) and
# 3.95 GB (ViT-H-14-378); the file headers add a few tens of kB.
_VIT_B_32 = 151_277_313 * 4
_VIT_B_16 = 149_620_737 * 4
_VIT_L_14 = 427_616_513 * 4
_VIT_H_14_378 = 986_714_881 * 4

# What a diffusers folder needs (configs, tokenizers, fp16 weights) and a transformers folder
# needs (configs, tokenizer, chat template, safetensors weights).
_DIFFUSERS_FP16 = (
    "model_index.json",
    "*/*.json",
    "*/*.txt",
    "*/*.model",
    "*/*.fp16.safetensors",
)
_TRANSFORMERS = ("*.json", "*.txt", "*.model", "*.jinja", "*.safetensors")

_OFFERS: tuple[ModelOffer, ...] = (
    ModelOffer(
        spec=DEMO_SPEC,
        label="Demo model (bundled)",
        download_bytes=0,
        memory_bytes=450 * _MB,
        good_at="Only the demo collection's coloured shapes; instant, no download.",
        licence="same as Quadrat",
        source="bundled with Quadrat",
        size_verified=True,
        licence_verified=True,
    ),
    ModelOffer(
        spec="ViT-B-32:laion2b_s34b_b79k",
        label="ViT-B/32 · LAION-2B",
        download_bytes=_VIT_B_32,
        memory_bytes=_memory(_VIT_B_32),
        good_at="Fast general-purpose search; indexes quickly on a laptop CPU.",
        licence="MIT",
        source="laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
        size_verified=True,
    ),
    ModelOffer(
        spec="ViT-L-14:laion2b_s32b_b82k",
        label="ViT-L/14 · LAION-2B",
        download_bytes=_VIT_L_14,
        memory_bytes=_memory(_VIT_L_14),
        good_at="More accurate on fine detail (markings, habitat); about 6x slower, wants a GPU.",
        licence="MIT",
        source="laion/CLIP-ViT-L-14-laion2B-s32B-b82K",
        size_verified=True,
    ),
    ModelOffer(
        spec="hf-hub:imageomics/bioclip",
        label="BioCLIP · TreeOfLife-10M",
        download_bytes=_VIT_B_16,
        memory_bytes=_memory(_VIT_B_16),
        good_at="Species names and taxonomy (trained on the tree of life); weaker on scenes.",
        licence="MIT",
        source="imageomics/bioclip",
        size_verified=True,
    ),
    ModelOffer(
        spec="ViT-H-14-378-quickgelu:dfn5b",
        label="ViT-H/14-378 · DFN-5B",
        download_bytes=_VIT_H_14_378,
        memory_bytes=_memory(_VIT_H_14_378),
        good_at="Among the best open CLIP models on the INQUIRE natural-world benchmark; "
        "needs a large GPU.",
        licence="Apple Sample Code License",
        source="apple/DFN5B-CLIP-ViT-H-14-378",
        size_verified=True,
    ),
    # Image generators (diffusers folders). Only the fp16 weight files are fetched: half the
    # download, and the loader casts them up on a CPU. sdxl-turbo's size is the published
    # 6.94 GB fp16 checkpoint (the same UNet, text encoders and VAE); sd-turbo's is parameter
    # count x 2 bytes, an estimate not checked against the hub.
    ModelOffer(
        spec="hf-hub:stabilityai/sd-turbo",
        label="SD-Turbo (Stable Diffusion 2.1, distilled)",
        download_bytes=int(2.6 * _GB),
        memory_bytes=6 * _GB,
        good_at="Draws a 512 px picture in 1-4 steps: VisRet on a laptop GPU or, slowly, a CPU.",
        licence="Stability AI Non-Commercial Research Community License",
        source="stabilityai/sd-turbo",
        role="generator",
        files=_DIFFUSERS_FP16,
    ),
    ModelOffer(
        spec="hf-hub:stabilityai/sdxl-turbo",
        label="SDXL-Turbo (SDXL, distilled)",
        download_bytes=int(6.94 * _GB),
        memory_bytes=10 * _GB,
        good_at="Better drawings of animals and habitats than SD-Turbo in 1-4 steps; wants a GPU.",
        licence="Stability AI Non-Commercial Research Community License",
        source="stabilityai/sdxl-turbo",
        role="generator",
        files=_DIFFUSERS_FP16,
        size_verified=True,
        licence_verified=True,
    ),
    # Vision-language models for Reranked's yes/no questions (transformers folders). Qwen2.5-VL's
    # size is its published shards; SmolVLM's and PaliGemma 2's are estimates not checked against
    # the hub. Memory is what a bf16 GPU load or a CPU run takes, roughly.
    ModelOffer(
        spec="hf-hub:HuggingFaceTB/SmolVLM-256M-Instruct",
        label="SmolVLM 256M Instruct (Idefics3)",
        download_bytes=513 * _MB,
        memory_bytes=int(1.5 * _GB),
        good_at="Answers simple yes/no questions about a photo; runs on a CPU.",
        licence="Apache-2.0",
        source="HuggingFaceTB/SmolVLM-256M-Instruct",
        role="vlm",
        files=_TRANSFORMERS,
        skip=("onnx/*",),
        licence_verified=True,
    ),
    ModelOffer(
        spec="hf-hub:Qwen/Qwen2.5-VL-3B-Instruct",
        label="Qwen2.5-VL 3B Instruct",
        download_bytes=int(7.51 * _GB),  # two bf16 shards, 3.98 GB + 3.53 GB
        memory_bytes=10 * _GB,
        good_at="Fine detail, counts and relations in a photo; wants a GPU with bf16.",
        licence="Qwen Research License (non-commercial)",
        source="Qwen/Qwen2.5-VL-3B-Instruct",
        role="vlm",
        files=_TRANSFORMERS,
        size_verified=True,
    ),
    ModelOffer(
        spec="hf-hub:google/paligemma2-3b-pt-224",
        label="PaliGemma 2 3B (224 px, pretrained)",
        download_bytes=int(12.1 * _GB),  # published in float32: 3B parameters x 4 bytes
        memory_bytes=13 * _GB,
        good_at="The model family INQUIRE's reranking baseline asks; gated (accept the Gemma "
        "terms on the hub, set HF_TOKEN).",
        licence="Gemma Terms of Use",
        source="google/paligemma2-3b-pt-224",
        role="vlm",
        files=_TRANSFORMERS,
        gated=True,
    ),
)


def model_offers(role: Role | None = None) -> list[ModelOffer]:
    """The models the chooser offers (of one role, or all), encoders first, demo first."""
    return [offer for offer in _OFFERS if role is None or offer.role == role]


def _offer(spec: str) -> ModelOffer | None:
    return next((offer for offer in _OFFERS if offer.spec == spec), None)


def offer_for(spec: str) -> ModelOffer | None:
    """The catalogue's offer of `spec`, or None."""
    return _offer(spec.strip())


def repository_role(spec: str) -> Role | None:
    """The role of a catalogue offer that is a multi-file repository (a generator or a VLM),
    or None for encoders and anything the catalogue does not list."""
    offer = _offer(spec.strip())
    return offer.role if offer is not None and offer.role != "encoder" else None


def licence_of(key: str) -> str:
    """The licence the catalogue gives a model, or a pointer to its model card."""
    offer = _offer(key)
    return offer.licence if offer else "see the source's model card"
