"""The demo answering model: a small head on the demo CLIP that answers yes/no questions about
the demo's drawn scenes (`scorer=demo`, the rerank default for a library indexed with the demo
model).

It reads what the region-aware CLIP scorer already computes: the demo CLIP's vectors of the
whole photo and its 9 crops (`engine.rerank.clip.crop_boxes`), and the CLIP text vectors of the
question's statement and, for a relation ("a red circle beside a blue square"), of each of its
two objects. A two-layer transformer over those tokens (a relation token, 3 text tokens, 10
crop tokens, each crop token with its cosine similarities to the 3 texts) gives one logit, read
as l_yes = logit / 2 and l_no = -logit / 2, so p(yes) = sigmoid(logit). The CLIP towers stay
frozen: the head learns where things are and how many there are from the crops, which CLIP's
one vector for the whole photo blurs (a blue circle beside a red square looks much like a red
circle beside a blue square to it).

How a pool is ordered (`DemoScorer.pool_scores`, `FUSIONS`): the head's p(yes) is a
probability, but two p's closer than the head's calibration error on its own validation scenes
say nothing about which photo is better, and the mean of them alone would replace the base
ranking's order there with noise (the loss on background queries, docs/BENCHMARKS.md). So the
default adds to each photo's mean p a base-rank prior of at most that error: the base decides
between photos the head cannot tell apart, the head reorders where it is sure.

The weights ship in resources/models (`ANSWERER_FILE`), trained by tools/train_demo_answerer.py
on scenes the demo generator draws from seed streams of their own, never the demo collection's
photos, queries or judgments. The file records the CLIP weights it was trained on; another
encoder is refused with one line.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import BadInputError, ModelLoadError, one_line
from engine.rerank.answering import answer_from, check_lengths
from engine.rerank.base import AGGREGATIONS, Answer, Photo, Question, aggregate

if TYPE_CHECKING:
    from collections.abc import Mapping

    import torch

    from engine.models.encoders import Encoder
    from engine.progress import CancelToken
    from engine.rerank.clip import ClipScorer

log = logging.getLogger(__name__)

ANSWERER_FILE = "quadrat-demo-answerer.safetensors"
ANSWERER_FORMAT = "quadrat-demo-answerer/1"
BOXES = 10  # the whole photo and its 9 crops (len(crop_boxes(w, h)))
# Relation words the head knows, by what they mean; any other query has relation "none".
RELATIONS: tuple[str, ...] = ("none", "beside", "above", "below")
_RELATION_OF: dict[str, str] = {
    "beside": "beside",
    "next to": "beside",
    "alongside": "beside",
    "near": "beside",
    "and": "beside",
    "with": "beside",
    "above": "above",
    "over": "above",
    "on top of": "above",
    "below": "below",
    "under": "below",
    "underneath": "below",
}
# How the answers and the base rank make a pool's order (`fuse`): "prior" (the default), the
# mean p plus a base-rank prior of at most the head's calibration error over all questions;
# "prior-kind", the same with the error of its least calibrated kind of question; "tie", the
# mean p's order with the base order among photos whose p's lie within that error; "mean", the
# paper's mean p alone (ties in base order); "rrf", reciprocal rank fusion of the mean p's
# order and the base order; "rrf-tie", the same with the photos of one of "tie"'s runs tied.
FUSIONS: tuple[str, ...] = ("prior", "prior-kind", "tie", "mean", "rrf", "rrf-tie")
DEFAULT_FUSION = "rrf-tie"
# The head's expected calibration error on its 500 validation scenes (seed purpose 6;
# `python tools/train_demo_answerer.py evaluate`, 10 bins of p): over all questions, and of
# its least calibrated kind (background; object 0.015, count 0.026, above 0.065). How far apart
# two p(yes) must be before their order says anything.
CALIBRATION_ERROR = 0.018
CALIBRATION_ERROR_KIND = 0.0705
RRF_K = 60  # reciprocal rank fusion's usual constant (Cormack, Clarke & Buettcher 2009)
_ARTICLE = re.compile(r"^(?:a|an|the|one)\s+", re.IGNORECASE)


def statement_parts(statement: str) -> tuple[str, str, str, int]:
    """(the statement, its first object, its second object, relation index) for the head's
    text tokens: "a red circle beside a blue square" -> ("a red circle beside a blue square",
    "red circle", "blue square", 1); a statement without a known relation -> (s, s, "", 0)."""
    from engine.rerank.decompose import split_relation

    text = " ".join(statement.split())
    relation = split_relation(text)
    if relation is not None:
        x, rel, y = relation
        kind = _RELATION_OF.get(rel)
        if kind is not None:
            return text, _ARTICLE.sub("", x), _ARTICLE.sub("", y), RELATIONS.index(kind)
    return text, text, "", 0


def build_head(config: dict[str, int]) -> torch.nn.Module:
    """The answering head for `config` (dim, width, layers, heads), untrained."""
    import torch
    from torch import nn

    class DemoAnswerer(nn.Module):
        def __init__(self, dim: int, width: int, layers: int, heads: int) -> None:
            super().__init__()
            self.crop_in = nn.Linear(dim + 3, width)
            self.box = nn.Parameter(torch.zeros(BOXES, width))
            self.text_in = nn.Linear(dim, width)
            self.text_kind = nn.Parameter(torch.zeros(3, width))
            self.relation = nn.Embedding(len(RELATIONS), width)
            layer = nn.TransformerEncoderLayer(
                width, heads, 2 * width, dropout=0.0, batch_first=True, norm_first=True
            )
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.out = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 1))
            nn.init.normal_(self.box, std=0.02)
            nn.init.normal_(self.text_kind, std=0.02)

        def forward(
            self, crops: torch.Tensor, texts: torch.Tensor, relation: torch.Tensor
        ) -> torch.Tensor:
            """crops (B, 10, dim), texts (B, 3, dim) (a missing object: zeros), relation (B,)
            -> the yes-minus-no logit (B,)."""
            sims = torch.einsum("bcd,btd->bct", crops, texts) * 10.0
            crop_tokens = self.crop_in(torch.cat([crops, sims], dim=-1)) + self.box
            text_tokens = self.text_in(texts) + self.text_kind
            head = self.relation(relation).unsqueeze(1)
            tokens = torch.cat([head, text_tokens, crop_tokens], dim=1)
            result: torch.Tensor = self.out(self.encoder(tokens)[:, 0]).squeeze(-1)
            return result

    return DemoAnswerer(config["dim"], config["width"], config["layers"], config["heads"])


def answerer_path() -> Path:
    """The bundled answering model's weights file."""
    from engine.models.spec import bundled_model_file

    return bundled_model_file(ANSWERER_FILE)


def read_answerer(path: Path) -> tuple[torch.nn.Module, dict[str, str]]:
    """The head saved in `path` and its metadata; `ModelLoadError` with one line when the file
    is missing, unreadable, not an answering model or does not fit its own config."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
        tensors = load_file(str(path))
    except (OSError, SafetensorError, ValueError) as error:
        raise ModelLoadError(
            f"demo answering model {path}: cannot read it ({one_line(error)}); reinstall "
            "Quadrat, or use scorer=clip"
        ) from error
    if metadata.get("format") != ANSWERER_FORMAT:
        raise ModelLoadError(
            f"demo answering model {path}: not a {ANSWERER_FORMAT} file; reinstall Quadrat, "
            "or use scorer=clip"
        )
    try:
        config = {k: int(v) for k, v in json.loads(metadata["config"]).items()}
        head = build_head(config)
        head.load_state_dict(tensors)
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise ModelLoadError(
            f"demo answering model {path}: its weights do not fit its config "
            f"({one_line(error)}); reinstall Quadrat, or use scorer=clip"
        ) from error
    head.eval()
    return head, metadata


def trained_for(path: Path) -> str:
    """The CLIP model key the answering model in `path` was trained on ("" when unreadable)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            return str((handle.metadata() or {}).get("clip_model_key", ""))
    except Exception:  # noqa: BLE001 - any unreadable file just means "not this one"
        return ""


def fuse(
    answers: Mapping[int, Sequence[Answer]],
    base_rank: Mapping[int, int],
    how: str = "mean",
    fusion: str = DEFAULT_FUSION,
) -> dict[int, float]:
    """Each photo's rerank score from its p(yes) (aggregated by `how`) and its base rank
    (1 = first) in the pool `answers` holds, by `fusion` (see `FUSIONS`):

    - "prior": p + e (1 - (r - 1/2) / n) for the photo at base rank r of n, e the head's
      CALIBRATION_ERROR: a photo overtakes one the base ranked above it only when its p is
      higher by more than e times their distance in the base's order, as a share of the pool;
    - "prior-kind": the same with e = CALIBRATION_ERROR_KIND;
    - "tie": down the photos by p, a photo whose p is within CALIBRATION_ERROR_KIND of the
      highest p of its run joins that run, else it starts the next; runs in order of p, the
      photos of a run in base order (a pool whose p's all lie within the error: the base order);
    - "mean": p (ties keep the base order);
    - "rrf": 1 / (60 + its rank by p) + 1 / (60 + r);
    - "rrf-tie": the same, the photos of one of "tie"'s runs sharing their mean rank by p (a
      pool whose p's all lie within the error: the base order).
    """
    if how not in AGGREGATIONS:
        raise BadInputError(f"unknown aggregation {how!r}; choose one of {', '.join(AGGREGATIONS)}")
    if fusion not in FUSIONS:
        raise BadInputError(f"unknown fusion {fusion!r}; choose one of {', '.join(FUSIONS)}")
    p = {i: aggregate([a.p_yes for a in pairs], how) for i, pairs in answers.items()}
    n = len(p)
    if fusion == "mean":
        return p
    if fusion in ("prior", "prior-kind"):
        e = CALIBRATION_ERROR if fusion == "prior" else CALIBRATION_ERROR_KIND
        return {i: v + e * (1.0 - (base_rank[i] - 0.5) / n) for i, v in p.items()}
    by_p = sorted(p, key=lambda i: (-p[i], base_rank[i]))
    if fusion == "rrf":
        return {i: 1.0 / (RRF_K + k) + 1.0 / (RRF_K + base_rank[i]) for k, i in enumerate(by_p, 1)}
    # Runs of photos the head cannot tell apart: within CALIBRATION_ERROR_KIND of the run's top.
    runs: list[list[int]] = []
    for i in by_p:
        if runs and p[runs[-1][0]] - p[i] <= CALIBRATION_ERROR_KIND:
            runs[-1].append(i)
        else:
            runs.append([i])
    if fusion == "tie":
        order = [i for run in runs for i in sorted(run, key=lambda i: base_rank[i])]
        return {i: 1.0 - (k - 0.5) / n for k, i in enumerate(order, 1)}
    rank: dict[int, float] = {}
    first = 1
    for run in runs:
        rank.update(dict.fromkeys(run, first + (len(run) - 1) / 2))
        first += len(run)
    return {i: 1.0 / (RRF_K + rank[i]) + 1.0 / (RRF_K + base_rank[i]) for i in p}


class DemoScorer:
    """p(yes) from the demo answering model over the demo CLIP's crop and text vectors; a pool
    is ordered by `fuse` with `fusion`."""

    def __init__(
        self,
        encoder: Encoder,
        path: Path | None = None,
        batch_size: int = 256,
        clip: ClipScorer | None = None,
        fusion: str = DEFAULT_FUSION,
    ) -> None:
        from engine.rerank.clip import ClipScorer

        if fusion not in FUSIONS:
            raise BadInputError(f"scorer demo:{fusion}: write demo, " + ", ".join(
                f"demo:{f}" for f in FUSIONS))  # fmt: skip
        self.fusion = fusion

        path = answerer_path() if path is None else Path(path)
        self.head, metadata = read_answerer(path)
        wanted = metadata.get("clip_model_key", "")
        if wanted != encoder.model_key:
            raise BadInputError(
                "scorer demo answers on the demo model's vectors; this library is indexed with "
                f"{encoder.model_key}; use scorer=clip, vlm:PATH or endpoint:URL"
            )
        self.path = path
        self.encoder = encoder
        self.batch_size = batch_size
        self.identity = f"demo:{metadata.get('sha', 'unknown')}:{encoder.model_key}"
        # The region-aware CLIP scorer's crop vectors and their cache (shared with that scorer
        # when given, so switching between the two encodes no photo twice).
        self._clip = clip if clip is not None else ClipScorer(encoder, regions=True)
        # Measured like the CLIP scorers (the crops dominate; the head is a few ms a batch).
        self.seconds_per_call = 0.05

    def __repr__(self) -> str:
        return f"DemoScorer({self.identity!r}, fusion={self.fusion!r})"

    def pool_scores(
        self,
        answers: Mapping[int, Sequence[Answer]],
        base_rank: Mapping[int, int],
        how: str = "mean",
    ) -> dict[int, float]:
        """The rerank score of each photo of a pool (see `fuse`)."""
        return fuse(answers, base_rank, how, self.fusion)

    def text_vectors(self, statement: str) -> tuple[np.ndarray, int]:
        """The (3, dim) text tokens of a statement (a missing object: zeros), and its relation."""
        full, x, y, relation = statement_parts(statement)
        vectors = self._clip._texts([full, x, y or full])
        if not y:
            vectors = vectors.copy()
            vectors[2] = 0.0
        return vectors, relation

    def score(
        self,
        photos: Sequence[Photo],
        question: Question,
        *,
        history: Sequence[Sequence[tuple[Question, Answer]]] = (),
        context: str = "",
        cancel: CancelToken | None = None,
    ) -> list[Answer]:
        """One answer per photo; like CLIP it sees neither the history nor the context."""
        import torch

        from engine.rerank.clip import question_statement

        check_lengths(photos, history)
        with self._clip._lock:  # the CLIP scorer's cache, shared: its lock
            self._clip.photo_vectors(photos, cancel)
            texts, relation = self.text_vectors(question_statement(question))
        answers: list[Answer | None] = [None] * len(photos)
        rows: list[tuple[int, np.ndarray]] = []
        for i, photo in enumerate(photos):
            vectors = self._clip._photo_vectors.get(photo.content_hash)
            if vectors is None or len(vectors) != BOXES:
                answers[i] = Answer(0.0, "unreadable photo")
                continue
            rows.append((i, vectors))
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            crops = torch.from_numpy(np.stack([v for _, v in chunk]).astype(np.float32))
            text = torch.from_numpy(np.asarray(texts, dtype=np.float32)).expand(len(chunk), -1, -1)
            kinds = torch.full((len(chunk),), relation, dtype=torch.long)
            with torch.inference_mode():
                logits = self.head(crops, text, kinds).tolist()
            for (i, _), logit in zip(chunk, logits, strict=True):
                answers[i] = answer_from(0.5 * float(logit), -0.5 * float(logit))
        return [a if a is not None else Answer(0.0) for a in answers]


def features_for_training(
    encoder: Encoder, images: Sequence[Any], statements: Sequence[str]
) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, int]]]:
    """What the scorer feeds the head, for training: the (n, 10, dim) crop vectors of PIL
    `images` and each statement's text tokens and relation, computed exactly as `DemoScorer`
    computes them."""
    from engine.rerank.clip import crop_boxes

    crops = [image.crop(box) for image in images for box in crop_boxes(*image.size)]
    vectors = encoder.encode_images(crops).reshape(len(images), BOXES, encoder.dim)
    texts: dict[str, tuple[np.ndarray, int]] = {}
    unique = list(dict.fromkeys(statements))
    parts = [statement_parts(s) for s in unique]
    flat = [t for full, x, y, _ in parts for t in (full, x, y or full)]
    encoded = encoder.encode_texts(flat).reshape(len(unique), 3, -1) if unique else None
    for k, (statement, (_, _, y, relation)) in enumerate(zip(unique, parts, strict=True)):
        assert encoded is not None
        block = encoded[k].copy()
        if not y:
            block[2] = 0.0
        texts[statement] = (block, relation)
    return vectors, texts
