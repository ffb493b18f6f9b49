"""Scorers: answer one yes/no subquery per photo with p(yes) in [0, 1] (docs/SPEC.md §2.2).

Three kinds behind the `Scorer` protocol of `engine.rerank.base`:

- `ClipScorer`, always available offline, through the library's own encoder. A question is
  turned into a statement ("a photo of a red circle") and contrasted with a fixed "other"
  statement ("a photo of something else"); the two cosine similarities, multiplied by the
  model's logit scale, are the logits l_yes and l_no, and p = exp(l_yes) / (exp(l_yes) +
  exp(l_no)), a two-way softmax: CLIP's own zero-shot classifier between "it" and "not it".
  A negated statement ("a photo with no red circle") would be the obvious negative, but CLIP
  reads negation poorly: on the demo collection it ranks the photos of a species by "is there
  a red circle" at mAP 0.19, the "other" statement at 0.99. The region-aware variant also
  encodes a grid of crops (2x2 quarters, 3x3 overlapping half-size crops) and answers a
  question that names a `target` with the mean of the whole photo's logits and those of the
  crop that matches the target best, so that a blue circle beside a red square does not look
  like a "red circle" (demo binding questions: AP 0.87 whole, 0.99 regions).
- `VlmScorer`: a local image-text-to-text model through transformers; p from the logits of the
  first generated token ("Yes" against "No"), batched, on the GPU when there is one.
- `EndpointScorer`: an OpenAI-compatible chat endpoint with `logprobs`; p from the "Yes" and
  "No" tokens among the top 20 log-probabilities of the first token, 0 when neither is there
  (as INQUIRE's code does). Failures raise `ScorerError` with one line, never a silent 0.

Chaining (docs/SPEC.md §2.2): the VLM and the endpoint see the photo's earlier questions and their
own answers as earlier turns of the conversation; CLIP answers each question on its own.
`load_scorer(spec, context)` builds one from a spec string.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import math
import os
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from engine.errors import BadImageError, BadInputError, ModelLoadError, QuadratError, one_line
from engine.indexing.decode import decode_image
from engine.models.chat import ChatError, chat_url, post_chat
from engine.rerank.base import Answer, Photo, Question, Scorer, yes_probability

if TYPE_CHECKING:
    from engine.methods.context import MethodContext
    from engine.models.encoders import Encoder
    from engine.progress import CancelToken

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CLIP_VARIANT",
    "ClipScorer",
    "EndpointScorer",
    "ScorerError",
    "VlmScorer",
    "crop_boxes",
    "load_scorer",
    "question_statement",
]

# What "clip" means: "regions" (measured better on the demo's binding questions; see
# docs/BENCHMARKS.md, "Rerank scorers") or "whole".
DEFAULT_CLIP_VARIANT = "regions"

# The system instruction every language-model scorer gets, before the expert context.
YES_NO_INSTRUCTION = (
    "You are looking at one photo. Answer each question about it with a single word: Yes or No."
)


class ScorerError(QuadratError):
    """A scorer could not answer (endpoint unreachable, time-out, HTTP error, malformed
    answer, a model that cannot be loaded); the message is one line."""


def _check_lengths(photos: Sequence[Photo], history: Sequence[Sequence[Any]]) -> None:
    if history and len(history) != len(photos):
        raise ValueError(f"{len(history)} histories for {len(photos)} photos")


def _history_for(history: Sequence[Sequence[tuple[Question, Answer]]], i: int) -> list[Any]:
    return list(history[i]) if history else []


def _said(answer: Answer) -> str:
    """How an earlier answer is replayed in a chained prompt: "Yes" or "No"."""
    return "Yes" if answer.p_yes >= 0.5 else "No"


def _open_photo(photo: Photo, min_side: int | None = None) -> Image.Image:
    """The photo as an upright RGB image (BadImageError with a reason when it cannot be read)."""
    return decode_image(photo.path, min_side=min_side).image


def _unreadable(error: BadImageError) -> Answer:
    # A photo that cannot be read answers "no", and says why where the answer is shown.
    return Answer(0.0, f"unreadable photo: {one_line(error)}")


# ---------------------------------------------------------------------------------------------
# CLIP

_QUESTION_LEADS = re.compile(
    r"^(?:(?:does|do|did)\s+(?:this|the)\s+(?:image|photo|picture|photograph)\s+"
    r"(?:show|contain|depict|have|include)s?|"
    r"(?:is|are)\s+there|is\s+(?:this|it)|are\s+(?:these|they)|"
    r"(?:can|do)\s+you\s+see|(?:is|are))\s+",
    re.IGNORECASE,
)
_QUESTION_TAILS = re.compile(
    r"\s+(?:in|on)\s+(?:this|the)\s+(?:image|photo|picture|photograph)\s*$", re.IGNORECASE
)


def question_statement(question: Question) -> str:
    """The words a CLIP scorer encodes for `question`: its target when it names one, else the
    question with its yes/no frame taken off ("Does this image show two frogs?" -> "two frogs")."""
    if question.target.strip():
        return " ".join(question.target.split())
    text = " ".join(question.text.split()).rstrip("?.! ")
    text = _QUESTION_LEADS.sub("", text, count=1)
    text = _QUESTION_TAILS.sub("", text)
    return text.strip() or " ".join(question.text.split())


def crop_boxes(width: int, height: int) -> list[tuple[int, int, int, int]]:
    """The regions a region-aware CLIP scorer looks at, as (left, top, right, bottom): the
    whole photo, its four quarters, and nine half-size crops on a quarter-size stride (so an
    object on a quarter's border still lies whole inside some crop)."""
    boxes = [(0, 0, width, height)]
    for fx, fy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        boxes.append(
            (fx * width // 2, fy * height // 2, (fx + 1) * width // 2, (fy + 1) * height // 2)
        )
    for fy in (0, 1, 2):
        for fx in (0, 1, 2):
            if (fx, fy) in ((0, 0), (2, 0), (0, 2), (2, 2)):
                continue  # the same crops as the quarters
            left, top = fx * width // 4, fy * height // 4
            boxes.append((left, top, left + width // 2, top + height // 2))
    return boxes


class ClipScorer:
    """p(yes) from the library's CLIP encoder: a two-way softmax, at the model's logit scale,
    between the question's statement ("a photo of {statement}") and the "other" statement
    ("a photo of something else"). With `regions`, a question naming a target is answered
    with the mean of the whole photo's logits and the best-matching crop's (`crop_boxes`);
    whole-scene questions on the whole photo.

    Photo vectors (each photo's crops, batched) are encoded once per scorer and kept in memory
    by content hash, so later questions of a run cost only a text encoding.
    """

    POSITIVE = "a photo of {statement}"
    NEGATIVE = "a photo of something else"

    def __init__(
        self,
        encoder: Encoder,
        *,
        regions: bool = DEFAULT_CLIP_VARIANT == "regions",
        batch_size: int = 64,
        logit_scale: float | None = None,
    ) -> None:
        self.encoder = encoder
        self.regions = regions
        self.batch_size = batch_size
        kind = "clip-regions" if regions else "clip"
        self.identity = f"{kind}:{encoder.model_key}"
        self.logit_scale = logit_scale if logit_scale is not None else _logit_scale(encoder)
        # Measured on 2 CPU cores with the demo model, 3 questions (tests/bench/bench_scorers.py).
        self.seconds_per_call = 0.045 if regions else 0.012
        self._photo_vectors: dict[str, np.ndarray] = {}  # content hash -> (crops, dim)
        self._text_vectors: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ClipScorer({self.identity!r})"

    def _texts(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._text_vectors]
        if missing:
            for text, vector in zip(missing, self.encoder.encode_texts(missing), strict=True):
                self._text_vectors[text] = vector
        return np.stack([self._text_vectors[t] for t in texts])

    def _crops(self, image: Image.Image) -> list[Image.Image]:
        if not self.regions:
            return [image]
        return [image.crop(box) for box in crop_boxes(*image.size)]

    def photo_vectors(self, photos: Sequence[Photo], cancel: CancelToken | None = None) -> None:
        """Encode the photos not seen yet (all their crops, in batches of `batch_size`)."""
        pending: list[tuple[str, int]] = []  # (content hash, number of crops)
        crops: list[Image.Image] = []

        def flush() -> None:
            if not crops:
                return
            vectors = self.encoder.encode_images(crops)
            start = 0
            for key, n in pending:
                self._photo_vectors[key] = vectors[start : start + n]
                start += n
            pending.clear()
            crops.clear()

        for photo in photos:
            key = photo.content_hash
            if key in self._photo_vectors or any(key == k for k, _ in pending):
                continue
            if cancel is not None:
                cancel.check()
            try:
                image = _open_photo(photo, min_side=_encoder_side(self.encoder))
            except BadImageError as error:
                log.info("rerank: %s: %s", photo.path, error)
                continue
            parts = self._crops(image)
            pending.append((key, len(parts)))
            crops.extend(parts)
            if len(crops) >= self.batch_size:
                flush()
        flush()

    def score(
        self,
        photos: Sequence[Photo],
        question: Question,
        *,
        history: Sequence[Sequence[tuple[Question, Answer]]] = (),
        context: str = "",
        cancel: CancelToken | None = None,
    ) -> list[Answer]:
        """One answer per photo. CLIP sees neither the history nor the context (it cannot
        read a conversation); they are accepted for the protocol's sake."""
        _check_lengths(photos, history)
        with self._lock:  # one encoder, one cache: a scorer is used by one run at a time
            self.photo_vectors(photos, cancel)
            statement = question_statement(question)
            texts = self._texts([self.POSITIVE.format(statement=statement), self.NEGATIVE])
        answers: list[Answer] = []
        use_regions = self.regions and bool(question.target.strip())
        for photo in photos:
            vectors = self._photo_vectors.get(photo.content_hash)
            if vectors is None:
                answers.append(Answer(0.0, "unreadable photo"))
                continue
            logits = self.logit_scale * (vectors @ texts.T)  # (crops, 2); crop 0 = whole
            l_yes, l_no = float(logits[0, 0]), float(logits[0, 1])
            where = ""
            if use_regions and len(logits) > 1:
                # Half the whole photo's logits, half the best crop's: the best crop alone
                # binds colour to shape but lets background clutter answer species questions
                # (demo, species mAP 0.99 -> 0.77); the blend keeps both (docs/BENCHMARKS.md).
                best = 1 + int(np.argmax(logits[1:, 0] - logits[1:, 1]))
                l_yes = 0.5 * (l_yes + float(logits[best, 0]))
                l_no = 0.5 * (l_no + float(logits[best, 1]))
                where = f" (region {best})"
            p = yes_probability(l_yes, l_no)
            answers.append(Answer(p, ("yes" if p >= 0.5 else "no") + where, l_yes, l_no))
        return answers


def _logit_scale(encoder: Encoder) -> float:
    """The model's own softmax temperature (CLIP learns it: 100 for the released models)."""
    model = getattr(encoder, "model", None)
    scale = getattr(model, "logit_scale", None)
    if scale is None:
        return 100.0
    try:
        value = float(scale.detach().exp().item()) if hasattr(scale, "detach") else float(scale)
    except (TypeError, ValueError):
        return 100.0
    return value if math.isfinite(value) and value > 0 else 100.0


def _encoder_side(encoder: Encoder) -> int | None:
    # Crops are half the photo's side: decode large JPEGs at twice the model's input size.
    side = getattr(encoder, "image_size", None)
    return 2 * int(side) if isinstance(side, int) else None


# ---------------------------------------------------------------------------------------------
# Prompts shared by the language-model scorers


def _question_text(question: Question) -> str:
    return " ".join(question.text.split())


def _system_text(context: str) -> str:
    context = " ".join(context.split())
    return f"{YES_NO_INSTRUCTION}\n\n{context}" if context else YES_NO_INSTRUCTION


def _yes_no_variants(text: str) -> bool | None:
    """True for a "Yes" token, False for a "No" token (any case, surrounding blanks or the
    SentencePiece / byte-level space marks), None for any other token."""
    word = text.replace("\u2581", " ").replace("\u0120", " ").strip().lower()
    if word == "yes":
        return True
    if word == "no":
        return False
    return None


def _logsumexp(values: Sequence[float]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None
    top = max(finite)
    return top + math.log(math.fsum(math.exp(v - top) for v in finite))


# ---------------------------------------------------------------------------------------------
# Local vision-language model (transformers)


def folder_identity(folder: Path) -> str:
    """ "sha256-<16 hex>" of a model folder: every file's name and size, and the bytes of
    every file up to 64 MiB and the first and last MiB of larger ones (the weights), so two
    folders holding different models never share a cache entry without hashing gigabytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(folder).as_posix()}\0{size}\0".encode())
        with path.open("rb") as handle:
            if size <= 64 << 20:
                digest.update(handle.read())
            else:
                digest.update(handle.read(1 << 20))
                handle.seek(size - (1 << 20))
                digest.update(handle.read())
    return f"sha256-{digest.hexdigest()[:16]}"


class VlmScorer:
    """A local image-text-to-text model (LLaVA, Idefics, SmolVLM, Qwen2-VL, ... saved as a
    transformers folder with its processor). Each photo is one conversation: the system turn
    holds the yes/no instruction and the expert context, the first user turn holds the photo
    and the first question, earlier questions and the model's answers follow as turns
    (chaining), then the new question. p(yes) comes from the log-softmax of the first generated
    token's logits: the "Yes" variants against the "No" variants of the tokenizer."""

    def __init__(
        self,
        folder: Path,
        *,
        device: str = "auto",
        batch_size: int = 8,
        max_side: int = 768,
    ) -> None:
        try:
            import torch
            import transformers
        except ImportError as error:
            raise ModelLoadError(
                f"the vlm scorer needs transformers ({one_line(error)})"
            ) from error
        folder = Path(folder).expanduser()
        if not folder.is_dir():
            raise BadInputError(f"vlm scorer: {folder} is not a model folder")
        from engine.models.encoders import choose_device

        self.folder = folder
        self.device = choose_device(device)
        self.batch_size = batch_size
        self.max_side = max_side
        self.identity = f"vlm:{folder_identity(folder)}"
        self.seconds_per_call = 0.4 if self.device == "cpu" else 0.05
        try:
            # transformers' Auto classes are untyped (or typed for other uses): go through Any.
            auto: Any = transformers
            self.processor: Any = auto.AutoProcessor.from_pretrained(folder)
            dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
            self.model: Any = auto.AutoModelForImageTextToText.from_pretrained(folder, dtype=dtype)
        except (OSError, ValueError, KeyError, RuntimeError) as error:
            raise ModelLoadError(f"vlm scorer: cannot load {folder}: {one_line(error)}") from error
        self.model.to(self.device).eval()
        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        # The first answer token is read at the last position: pad on the left so that it is
        # the last position of every prompt in a batch.
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.tokenizer: Any = tokenizer
        self.yes_ids, self.no_ids = _yes_no_ids(tokenizer)
        if not self.yes_ids or not self.no_ids:
            raise ModelLoadError(f"vlm scorer: the tokenizer of {folder} has no Yes/No token")

    def __repr__(self) -> str:
        return f"VlmScorer({self.identity!r}, device={self.device!r})"

    def messages(
        self, question: Question, history: Sequence[tuple[Question, Answer]], context: str
    ) -> list[dict[str, Any]]:
        """The conversation for one photo (the photo itself goes in the first user turn)."""
        turns: list[tuple[Question, str | None]] = [(q, _said(a)) for q, a in history]
        turns.append((question, None))
        out: list[dict[str, Any]] = [
            {"role": "system", "content": [{"type": "text", "text": _system_text(context)}]}
        ]
        for i, (q, said) in enumerate(turns):
            content: list[dict[str, Any]] = [{"type": "text", "text": _question_text(q)}]
            if i == 0:
                content.insert(0, {"type": "image"})
            out.append({"role": "user", "content": content})
            if said is not None:
                out.append({"role": "assistant", "content": [{"type": "text", "text": said}]})
        return out

    def prompt(
        self, question: Question, history: Sequence[tuple[Question, Answer]], context: str
    ) -> str:
        """The prompt text the model reads for one photo (its chat template applied)."""
        messages = self.messages(question, history, context)
        if getattr(self.processor, "chat_template", None):
            text: str = self.processor.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            return text
        # A processor without a chat template: a plain transcript with the image token.
        image_token = getattr(self.processor, "image_token", "<image>")
        lines = [_system_text(context)]
        for message in messages[1:]:
            words = " ".join(
                image_token if c["type"] == "image" else c["text"] for c in message["content"]
            )
            lines.append(f"{message['role'].capitalize()}: {words}")
        return "\n".join(lines) + "\nAssistant:"

    def score(
        self,
        photos: Sequence[Photo],
        question: Question,
        *,
        history: Sequence[Sequence[tuple[Question, Answer]]] = (),
        context: str = "",
        cancel: CancelToken | None = None,
    ) -> list[Answer]:
        """One answer per photo, `batch_size` photos per forward pass."""
        _check_lengths(photos, history)
        answers: list[Answer | None] = [None] * len(photos)
        readable: list[tuple[int, Image.Image]] = []
        for i, photo in enumerate(photos):
            try:
                image = _open_photo(photo, min_side=self.max_side)
            except BadImageError as error:
                answers[i] = _unreadable(error)
                continue
            image.thumbnail((self.max_side, self.max_side))
            readable.append((i, image))
        for start in range(0, len(readable), self.batch_size):
            if cancel is not None:
                cancel.check()
            chunk = readable[start : start + self.batch_size]
            prompts = [self.prompt(question, _history_for(history, i), context) for i, _ in chunk]
            firsts = self._first_token(prompts, [im for _, im in chunk])
            for (i, _), pair in zip(chunk, firsts, strict=True):
                answers[i] = _answer_from(*pair)
        return [a if a is not None else Answer(0.0) for a in answers]

    def _first_token(
        self, prompts: Sequence[str], images: Sequence[Image.Image]
    ) -> list[tuple[float | None, float | None]]:
        """(log p("Yes"), log p("No")) of the first generated token for each prompt."""
        import torch

        inputs = self.processor(
            text=list(prompts),
            images=[[image] for image in images],
            padding=True,
            return_tensors="pt",
        ).to(self.device)
        with torch.inference_mode():
            logits = self.model(**inputs).logits[:, -1, :].float()
        logprobs = torch.log_softmax(logits, dim=-1).cpu()
        out: list[tuple[float | None, float | None]] = []
        for row in logprobs:
            yes = _logsumexp([float(row[t]) for t in self.yes_ids])
            no = _logsumexp([float(row[t]) for t in self.no_ids])
            out.append((yes, no))
        return out


def _yes_no_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The single-token ids of "Yes" and "No" as a model may start its answer ("Yes", " Yes",
    "yes", " yes", ...), each id once."""
    found: dict[bool, list[int]] = {True: [], False: []}
    for word in ("Yes", "yes", "YES", "No", "no", "NO"):
        for text in (word, " " + word):
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) != 1:
                continue
            kind = _yes_no_variants(tokenizer.convert_ids_to_tokens(ids[0]) or "")
            if kind is not None and ids[0] not in found[kind]:
                found[kind].append(int(ids[0]))
    return found[True], found[False]


def _answer_from(l_yes: float | None, l_no: float | None, words: str = "") -> Answer:
    p = yes_probability(l_yes, l_no)
    said = words or ("yes" if p >= 0.5 else "no")
    return Answer(p, said, l_yes, l_no)


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible endpoint


def image_data_url(photo: Photo, max_side: int = 1024) -> str:
    """The photo as a base64 JPEG data URL, its longer side at most `max_side` pixels."""
    image = _open_photo(photo, min_side=max_side)
    image.thumbnail((max_side, max_side))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


class EndpointScorer:
    """An OpenAI-compatible chat-completions endpoint that returns log-probabilities (a
    llama.cpp or vLLM server, or a hosted one). Each (photo, question) is one request with
    `max_tokens: 1, logprobs: true, top_logprobs: 20`; `batch_size` requests run at once.
    Chaining: earlier questions and the model's answers are earlier turns of the messages."""

    TOP_LOGPROBS = 20

    def __init__(
        self,
        url: str,
        model: str = "",
        *,
        api_key: str = "",
        timeout: float = 60.0,
        batch_size: int = 4,
        max_side: int = 1024,
    ) -> None:
        if not url.strip():
            raise BadInputError("endpoint scorer: no URL given (endpoint:URL[#MODEL])")
        self.url = chat_url(url)
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.batch_size = max(1, batch_size)
        self.max_side = max_side
        self.identity = f"endpoint:{self.url}#{model}"
        self.seconds_per_call = 1.5

    def __repr__(self) -> str:
        return f"EndpointScorer({self.identity!r})"

    def messages(
        self,
        image_url: str,
        question: Question,
        history: Sequence[tuple[Question, Answer]],
        context: str,
    ) -> list[dict[str, Any]]:
        """The chat messages for one photo: system, the photo with the first question, the
        earlier answers and questions in turn, the new question last."""
        out: list[dict[str, Any]] = [{"role": "system", "content": _system_text(context)}]
        turns = [(q, _said(a)) for q, a in history] + [(question, None)]
        for i, (q, said) in enumerate(turns):
            if i == 0:
                content: Any = [
                    {"type": "image_url", "image_url": {"url": image_url}},
                    {"type": "text", "text": _question_text(q)},
                ]
            else:
                content = _question_text(q)
            out.append({"role": "user", "content": content})
            if said is not None:
                out.append({"role": "assistant", "content": said})
        return out

    def score(
        self,
        photos: Sequence[Photo],
        question: Question,
        *,
        history: Sequence[Sequence[tuple[Question, Answer]]] = (),
        context: str = "",
        cancel: CancelToken | None = None,
    ) -> list[Answer]:
        """One answer per photo; the first failed request raises `ScorerError` (one line)."""
        _check_lengths(photos, history)

        def one(i: int) -> Answer:
            if cancel is not None:
                cancel.check()
            try:
                image_url = image_data_url(photos[i], self.max_side)
            except BadImageError as error:
                return _unreadable(error)
            body = {
                "model": self.model,
                "messages": self.messages(image_url, question, _history_for(history, i), context),
                "max_tokens": 1,
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": self.TOP_LOGPROBS,
            }
            return self._answer(self._post(body))

        with ThreadPoolExecutor(max_workers=min(self.batch_size, max(1, len(photos)))) as pool:
            return list(pool.map(one, range(len(photos))))

    def _post(self, body: dict[str, Any]) -> Any:
        try:
            return post_chat(
                self.url,
                body,
                api_key=self.api_key,
                timeout=self.timeout,
                max_bytes=8 << 20,
                where=f"endpoint scorer: {self.url}",
            )
        except ChatError as error:
            raise ScorerError(str(error)) from error

    def _answer(self, reply: Any) -> Answer:
        """p from the first token's top log-probabilities (docs/SPEC.md §2; neither token -> 0)."""
        where = f"endpoint scorer: {self.url}"
        try:
            choice = reply["choices"][0]
            words = choice.get("message", {}).get("content") or ""
            logprobs = choice["logprobs"]
        except (KeyError, IndexError, TypeError, AttributeError) as error:
            raise ScorerError(f"{where}: the answer has no choices[0].logprobs") from error
        if logprobs is None:
            raise ScorerError(
                f"{where}: the answer has no log-probabilities (does the server support "
                "logprobs for this model?)"
            )
        try:
            first = logprobs["content"][0]
            top = first.get("top_logprobs") or [first]
            pairs = [(str(entry["token"]), float(entry["logprob"])) for entry in top]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
            raise ScorerError(
                f"{where}: malformed logprobs (expected content[0].top_logprobs)"
            ) from error
        yes = _logsumexp([lp for token, lp in pairs if _yes_no_variants(token) is True])
        no = _logsumexp([lp for token, lp in pairs if _yes_no_variants(token) is False])
        return _answer_from(yes, no, " ".join(str(words).split())[:80])


# ---------------------------------------------------------------------------------------------
# Specs


def scorer_specs() -> tuple[str, ...]:
    """The forms `load_scorer` accepts."""
    return ("clip", "clip:regions", "clip:whole", "vlm:PATH", "endpoint:URL[#MODEL]")


def load_scorer(spec: str, context: MethodContext) -> Scorer:
    """A scorer from its spec: "clip" (the measured default variant), "clip:regions",
    "clip:whole", "vlm:PATH" (a transformers model folder) or "endpoint:URL[#MODEL]".

    The endpoint's API key is the configured one (`context.llm`) when the URL is the
    configured endpoint, else the environment variable QUADRAT_LLM_API_KEY. Models are loaded
    once through `context.models`.
    """
    text = spec.strip()
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind == "clip":
        variant = rest.strip().lower() or DEFAULT_CLIP_VARIANT
        if variant not in ("regions", "whole"):
            raise BadInputError(f"scorer {spec!r}: write clip, clip:regions or clip:whole")
        encoder = context.encoder
        key = f"scorer:clip-{variant}:{encoder.model_key}"
        return context.models.get(
            key, lambda: ClipScorer(encoder, regions=variant == "regions"), large=False
        )
    if kind == "vlm":
        folder = Path(rest.strip()).expanduser()
        if not rest.strip():
            raise BadInputError("scorer vlm: give the model folder (vlm:PATH)")
        if not folder.is_dir():
            raise BadInputError(f"scorer {spec!r}: {folder} is not a folder")
        return context.models.get(f"scorer:vlm:{folder.resolve()}", lambda: VlmScorer(folder))
    if kind == "endpoint":
        url, _, model = rest.strip().partition("#")
        if not url.strip():
            raise BadInputError("scorer endpoint: give the URL (endpoint:URL[#MODEL])")
        configured = context.llm
        same = configured.configured and chat_url(configured.url) == chat_url(url)
        api_key = configured.api_key if same else os.environ.get("QUADRAT_LLM_API_KEY", "")
        if not model.strip() and same:
            model = configured.model
        return EndpointScorer(url.strip(), model.strip(), api_key=api_key)
    raise BadInputError(f"unknown scorer {spec!r}; use one of: {', '.join(scorer_specs())}")
