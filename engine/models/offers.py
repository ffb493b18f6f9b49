"""The catalogue of models the chooser offers: size, memory, what each is good at, licence."""

from __future__ import annotations

from dataclasses import dataclass

from engine.models.spec import DEMO_SPEC

_MB = 1_000_000


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

_OFFERS: tuple[ModelOffer, ...] = (
    ModelOffer(
        spec=DEMO_SPEC,
        label="Demo model (bundled)",
        download_bytes=0,
        memory_bytes=450 * _MB,
        good_at="Only the demo collection's coloured shapes; instant, no download.",
        licence="same as Quadrat",
        source="bundled with Quadrat",
    ),
    ModelOffer(
        spec="ViT-B-32:laion2b_s34b_b79k",
        label="ViT-B/32 · LAION-2B",
        download_bytes=_VIT_B_32,
        memory_bytes=_memory(_VIT_B_32),
        good_at="Fast general-purpose search; indexes quickly on a laptop CPU.",
        licence="MIT",
        source="laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
    ),
    ModelOffer(
        spec="ViT-L-14:laion2b_s32b_b82k",
        label="ViT-L/14 · LAION-2B",
        download_bytes=_VIT_L_14,
        memory_bytes=_memory(_VIT_L_14),
        good_at="More accurate on fine detail (markings, habitat); about 6x slower, wants a GPU.",
        licence="MIT",
        source="laion/CLIP-ViT-L-14-laion2B-s32B-b82K",
    ),
    ModelOffer(
        spec="hf-hub:imageomics/bioclip",
        label="BioCLIP · TreeOfLife-10M",
        download_bytes=_VIT_B_16,
        memory_bytes=_memory(_VIT_B_16),
        good_at="Species names and taxonomy (trained on the tree of life); weaker on scenes.",
        licence="MIT",
        source="imageomics/bioclip",
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
    ),
)


def model_offers() -> list[ModelOffer]:
    """The models the chooser offers, demo first."""
    return list(_OFFERS)


def _offer(spec: str) -> ModelOffer | None:
    return next((offer for offer in _OFFERS if offer.spec == spec), None)


def licence_of(key: str) -> str:
    """The licence the catalogue gives a model, or a pointer to its model card."""
    offer = _offer(key)
    return offer.licence if offer else "see the source's model card"
